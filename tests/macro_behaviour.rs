//! `#[idempotent]` deduplicates exactly as the guard does: the annotated
//! function is called as a tool would be, and every call that reaches the
//! stand-in provider is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use idempotent_tools::{ConflictReason, Error, MemoryStore, Outcome, Run, current_key, idempotent};
use serde::{Deserialize, Serialize};
use tokio::sync::{Barrier, Notify, Semaphore};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] Error),
    #[error("the provider declined")]
    Declined,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Refund {
    /// Which provider call made it: 1 for the first.
    provider_call: usize,
    order_id: String,
    usd: u64,
}

/// A payment provider that counts the refunds it is asked for, and can be
/// told to hold, fail or panic.
#[derive(Default)]
struct Provider {
    calls: AtomicUsize,
    entered: Notify,
    /// When set, each call waits for a permit before it finishes.
    gate: Option<Semaphore>,
    fail_next: AtomicBool,
    panic_next: AtomicBool,
}

impl Provider {
    fn new() -> Arc<Provider> {
        Arc::new(Provider::default())
    }

    fn gated() -> Arc<Provider> {
        Arc::new(Provider {
            gate: Some(Semaphore::new(0)),
            ..Provider::default()
        })
    }

    fn open(&self) {
        if let Some(gate) = &self.gate {
            gate.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    async fn refund(&self, order_id: String, usd: u64) -> Result<Refund, PayError> {
        let provider_call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.entered.notify_one();
        if let Some(gate) = &self.gate {
            let _permit = gate.acquire().await.map_err(|_| PayError::Declined)?;
        }
        if self.panic_next.swap(false, Ordering::SeqCst) {
            panic!("the provider's client panicked");
        }
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(PayError::Declined);
        }
        Ok(Refund {
            provider_call,
            order_id,
            usd,
        })
    }
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(
    run: Run,
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    let _ = reason;
    provider.refund(order_id, usd).await
}

/// Another tool whose keys render like `refund_order`'s.
#[idempotent(key = "<run>:refund:<order_id>")]
async fn cancel_order(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    provider.refund(order_id, 0).await
}

/// Keys on the run in scope.
#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_in_run(
    order_id: String,
    usd: u64,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    provider.refund(order_id, usd).await
}

fn run(name: &str) -> Run {
    Run::new(format!("{name}-{}", std::process::id())).expect("a run id is not empty")
}

async fn refund(
    run: &Run,
    order_id: &str,
    usd: u64,
    provider: &Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    refund_order(
        run.clone(),
        order_id.to_owned(),
        usd,
        "customer asked".to_owned(),
        Arc::clone(provider),
    )
    .await
}

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
    assert_eq!(again.note(), Some(idempotent_tools::DEFAULT_REPLAY_NOTE));
    assert_eq!(provider.calls(), 1);
}

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

#[tokio::test(flavor = "multi_thread")]
async fn other_arguments_in_flight_are_a_conflict_and_do_not_run() {
    let run = run("conflict-in-flight");
    let provider = Provider::gated();
    let first = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund(&run, "1182", 42, &provider).await }
    });
    provider.entered.notified().await;

    let other = refund(&run, "1182", 41, &provider)
        .await
        .expect("a conflict is not an error");
    match other {
        Outcome::Conflict { first, reason, .. } => {
            assert_eq!(reason, ConflictReason::Arguments);
            assert_eq!(first, None, "the first call has not finished");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    provider.open();
    assert!(
        first
            .await
            .expect("no panic")
            .expect("first succeeds")
            .is_fresh()
    );
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn other_arguments_after_completion_are_a_conflict_with_the_first_result() {
    let run = run("conflict-after");
    let provider = Provider::new();
    let first = refund(&run, "1182", 42, &provider)
        .await
        .expect("first succeeds");
    let other = refund(&run, "1182", 41, &provider)
        .await
        .expect("a conflict is not an error");
    match other {
        Outcome::Conflict {
            first: seen,
            reason,
            note,
        } => {
            assert_eq!(reason, ConflictReason::Arguments);
            assert_eq!(seen.as_ref(), first.value());
            assert_eq!(note, idempotent_tools::DEFAULT_CONFLICT_NOTE);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tool_with_a_key_that_renders_alike_is_a_conflict() {
    let run = run("other-tool");
    let provider = Provider::new();
    let refunded = refund(&run, "1182", 42, &provider)
        .await
        .expect("refund succeeds");
    assert!(refunded.is_fresh());
    let cancel = cancel_order(run.clone(), "1182".into(), Arc::clone(&provider))
        .await
        .expect("a conflict is not an error");
    match cancel {
        Outcome::Conflict { first, reason, .. } => {
            assert_eq!(reason, ConflictReason::OtherTool);
            assert_eq!(first, None, "never another tool's result");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(provider.calls(), 1, "the cancel never ran");
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_reentrant(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<String>, PayError> {
    let inner = Box::pin(refund_reentrant(run, order_id, Arc::clone(&provider))).await;
    match inner {
        Err(PayError::Idempotency(Error::Reentrant { key })) => Ok(key.to_string()),
        other => panic!("expected a re-entrancy error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn using_the_key_again_inside_its_own_action_fails_at_once() {
    let run = run("reentrant");
    let outcome = refund_reentrant(run.clone(), "1182".into(), Provider::new())
        .await
        .expect("the outer call succeeds");
    assert_eq!(
        outcome.into_value(),
        Some(format!("{}:refund:1182", run.as_str()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_on_the_run_with_no_run_in_scope_fails_and_does_not_act() {
    let provider = Provider::new();
    let result = refund_in_run("1182".into(), 42, Arc::clone(&provider)).await;
    assert!(matches!(
        result,
        Err(PayError::Idempotency(Error::MissingRun))
    ));
    assert_eq!(provider.calls(), 0);

    let outcome = run("scoped")
        .scope(refund_in_run("1182".into(), 42, Arc::clone(&provider)))
        .await
        .expect("a run in scope is used");
    assert!(outcome.is_fresh());
    assert_eq!(provider.calls(), 1);
}

/// Returns the key its body sees. `store` is the call's own store, so every
/// call can run fresh and show its key.
#[idempotent(key = "<run>:refund:<order_id>", store = &store)]
async fn key_seen(
    run: Run,
    order_id: u64,
    tool_call_id: String,
    #[context] store: Arc<MemoryStore>,
) -> Result<Outcome<String>, PayError> {
    let _ = tool_call_id;
    Ok(current_key().map(|k| k.to_string()).unwrap_or_default())
}

async fn key_for(run: &Run, order_id: u64, call_id: &str) -> String {
    key_seen(
        run.clone(),
        order_id,
        call_id.into(),
        Arc::new(MemoryStore::new()),
    )
    .await
    .expect("the call succeeds")
    .into_value()
    .expect("a fresh call has a value")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_ask_under_a_new_call_id_has_the_same_key() {
    let run = run("keys");
    let first = key_for(&run, 1182, "call_a").await;
    let again = key_for(&run, 1182, "call_b").await;
    assert_eq!(first, again);
    assert_eq!(first, format!("{}:refund:1182", run.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn another_order_has_another_key() {
    let run = run("keys-order");
    assert_ne!(
        key_for(&run, 1182, "call_a").await,
        key_for(&run, 1183, "call_a").await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_ask_under_a_new_call_id_is_a_replay() {
    let run = run("call-id");
    let store = Arc::new(MemoryStore::new());
    let first = key_seen(run.clone(), 1182, "call_a".into(), Arc::clone(&store))
        .await
        .expect("first succeeds");
    let again = key_seen(run.clone(), 1182, "call_b".into(), Arc::clone(&store))
        .await
        .expect("again succeeds");
    assert!(first.is_fresh());
    assert!(
        again.is_replay(),
        "the call id is neither keyed nor fingerprinted"
    );
}

#[idempotent(key = "<run>:refund:<order_id>", wait = "20ms")]
async fn refund_waiting_briefly(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    provider.refund(order_id, 42).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_past_the_wait_deadline_is_told_the_action_is_in_progress() {
    let run = run("wait");
    let provider = Provider::gated();
    let first = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund_waiting_briefly(run, "1182".into(), provider).await }
    });
    provider.entered.notified().await;

    let second = refund_waiting_briefly(run.clone(), "1182".into(), Arc::clone(&provider)).await;
    assert!(matches!(
        second,
        Err(PayError::Idempotency(Error::InProgress { .. }))
    ));
    provider.open();
    assert!(
        first
            .await
            .expect("no panic")
            .expect("first succeeds")
            .is_fresh()
    );
    assert_eq!(provider.calls(), 1, "the duplicate never ran");
}

#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
enum CardError {
    #[error("declined")]
    Declined,
    #[error("{0}")]
    Idempotency(String),
}

impl From<Error> for CardError {
    fn from(err: Error) -> CardError {
        CardError::Idempotency(err.to_string())
    }
}

#[idempotent(
    key = "<run>:charge:<order_id>",
    record_errors,
    note = "This card was already charged for the order."
)]
async fn charge(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, CardError> {
    provider
        .refund(order_id, 42)
        .await
        .map_err(|_| CardError::Declined)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_record_errors_a_declined_charge_is_final_and_not_retried() {
    let run = run("record-errors");
    let provider = Provider::new();
    provider.fail_next.store(true, Ordering::SeqCst);
    let first = charge(run.clone(), "1182".into(), Arc::clone(&provider)).await;
    let again = charge(run.clone(), "1182".into(), Arc::clone(&provider)).await;
    assert_eq!(first, Err(CardError::Declined));
    assert_eq!(
        again,
        Err(CardError::Declined),
        "the recorded error comes back"
    );
    assert_eq!(provider.calls(), 1, "a final error is not retried");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_carries_the_tools_own_note() {
    let run = run("note");
    let provider = Provider::new();
    let first = charge(run.clone(), "1182".into(), Arc::clone(&provider))
        .await
        .expect("first charge succeeds");
    assert!(first.is_fresh());
    let again = charge(run.clone(), "1182".into(), Arc::clone(&provider))
        .await
        .expect("the repeat succeeds");
    assert_eq!(
        again.note(),
        Some("This card was already charged for the order.")
    );
    assert_eq!(provider.calls(), 1);
}

struct Shop {
    store: Arc<MemoryStore>,
    provider: Arc<Provider>,
}

impl Shop {
    fn new(provider: &Arc<Provider>) -> Shop {
        Shop {
            store: Arc::new(MemoryStore::new()),
            provider: Arc::clone(provider),
        }
    }

    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store)]
    async fn refund(&self, run: Run, order_id: String) -> Result<Outcome<Refund>, PayError> {
        self.provider.refund(order_id, 42).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_site_store_keeps_its_own_records() {
    let run = run("store");
    let provider = Provider::new();
    let (east, west) = (Shop::new(&provider), Shop::new(&provider));
    assert!(
        east.refund(run.clone(), "1182".into())
            .await
            .expect("east")
            .is_fresh()
    );
    assert!(
        east.refund(run.clone(), "1182".into())
            .await
            .expect("east again")
            .is_replay()
    );
    assert!(
        west.refund(run.clone(), "1182".into())
            .await
            .expect("west")
            .is_fresh(),
        "another store has no record of the first refund"
    );
    assert_eq!(provider.calls(), 2);
}
