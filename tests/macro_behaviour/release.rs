//! A claim whose call ends without a result (an error, a panic, a drop) is
//! released, so a retry or a waiting duplicate runs the action.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::provider::{PayError, Provider};
use crate::refund::{refund, run};

#[tokio::test(flavor = "multi_thread")]
async fn an_error_releases_the_claim_and_a_retry_runs() {
    let run = run("error");
    let provider = Provider::new();
    provider.fail_next.store(true, Ordering::SeqCst);
    let failed = refund(&run, "1182", 42, &provider).await;
    assert!(matches!(failed, Err(PayError::Declined)));

    let retried = refund(&run, "1182", 42, &provider)
        .await
        .expect("the retry succeeds");
    assert!(
        retried.is_fresh(),
        "nothing was recorded for the failed call"
    );
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_first_call_fails_a_waiting_duplicate_takes_over_and_runs() {
    let run = run("error-waiter");
    let provider = Provider::gated();
    provider.fail_next.store(true, Ordering::SeqCst);
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
    provider.open();

    let first = first.await.expect("no panic");
    let second = second.await.expect("no panic").expect("the duplicate runs");
    assert!(matches!(first, Err(PayError::Declined)));
    assert!(second.is_fresh(), "the duplicate did not hang, and ran");
    assert_eq!(second.value().map(|r| r.provider_call), Some(2));
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panic_releases_the_claim() {
    let run = run("panic");
    let provider = Provider::new();
    provider.panic_next.store(true, Ordering::SeqCst);
    let panicked = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund(&run, "1182", 42, &provider).await }
    })
    .await;
    assert!(panicked.expect_err("the call panicked").is_panic());

    let retried = refund(&run, "1182", 42, &provider)
        .await
        .expect("the retry succeeds");
    assert!(retried.is_fresh());
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_call_releases_the_claim() {
    let run = run("dropped");
    let provider = Provider::gated();
    let call = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund(&run, "1182", 42, &provider).await }
    });
    provider.entered.notified().await;
    call.abort();
    assert!(call.await.expect_err("the call was dropped").is_cancelled());

    provider.open();
    let retried = refund(&run, "1182", 42, &provider)
        .await
        .expect("the retry succeeds");
    assert!(retried.is_fresh(), "the dropped call left no claim behind");
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_dropped_by_select_releases_the_claim() {
    let run = run("select");
    let provider = Provider::gated();
    tokio::select! {
        _ = refund(&run, "1182", 42, &provider) => panic!("the call is held at the gate"),
        () = provider.entered.notified() => {}
    }
    provider.open();
    let retried = refund(&run, "1182", 42, &provider)
        .await
        .expect("the retry succeeds");
    assert!(retried.is_fresh());
    assert_eq!(provider.calls(), 2);
}
