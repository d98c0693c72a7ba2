//! Repeats of one ask: however many calls arrive, together, while the first
//! runs or after it was completed, the provider refunds once.

use std::sync::Arc;

use tokio::sync::Barrier;

use crate::provider::Provider;
use crate::refund::{refund, refund_order, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_identical_calls_refund_once_and_one_result_is_fresh() {
    const CALLS: usize = 64;
    let run = run("concurrent");
    let provider = Provider::gated();
    let start = Arc::new(Barrier::new(CALLS));
    let mut tasks = Vec::new();
    for _ in 0..CALLS {
        let (run, provider, start) = (run.clone(), Arc::clone(&provider), Arc::clone(&start));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            refund(&run, "1182", 42, &provider).await
        }));
    }
    // The first refund is held at the provider until here, so the others
    // find it in flight or finished, never free to run.
    provider.entered.notified().await;
    provider.open();

    let mut fresh = 0;
    for task in tasks {
        let outcome = task
            .await
            .expect("no call panics")
            .expect("every call succeeds");
        assert!(
            !outcome.is_conflict(),
            "an identical call is never a conflict"
        );
        fresh += usize::from(outcome.is_fresh());
        assert_eq!(outcome.value().map(|r| r.provider_call), Some(1));
    }
    assert_eq!(fresh, 1, "exactly one caller gets the fresh result");
    assert_eq!(provider.calls(), 1, "the provider refunded once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_in_flight_waits_and_gets_the_first_result() {
    let run = run("in-flight");
    let provider = Provider::gated();
    let first = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund(&run, "1182", 42, &provider).await }
    });
    provider.entered.notified().await;
    let second = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund(&run, "1182", 42, &provider).await }
    });
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(
        !second.is_finished(),
        "the duplicate waits for the first call"
    );
    provider.open();

    let first = first.await.expect("no panic").expect("first succeeds");
    let second = second.await.expect("no panic").expect("second succeeds");
    assert!(first.is_fresh());
    assert!(second.is_replay());
    assert_eq!(first.value(), second.value());
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeat_after_completion_is_a_replay_with_the_recorded_result() {
    let run = run("replay");
    let provider = Provider::new();
    let first = refund(&run, "1182", 42, &provider)
        .await
        .expect("first succeeds");
    // The model words its reason differently: still the same ask.
    let again = refund_order(
        run.clone(),
        "1182".into(),
        42,
        "the parcel arrived broken".into(),
        Arc::clone(&provider),
    )
    .await
    .expect("the repeat succeeds");

    assert!(first.is_fresh());
    assert!(again.is_replay());
    assert_eq!(again.value(), first.value());
    assert_eq!(
        again.note(),
        Some(idempotent_tools::call::DEFAULT_REPLAY_NOTE)
    );
    assert_eq!(provider.calls(), 1);
}
