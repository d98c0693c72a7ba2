//! The adversarial suite every store must pass, written once.
//!
//! Each case takes a store and counts what reached a stand-in provider.
//! A store's test file instantiates the whole suite with
//! `adversarial_suite!(make_store())`, where `make_store()` is an async
//! expression giving `Option<Arc<dyn Store>>` (`None` skips, for a server that
//! is not configured outside CI).
//!
//! Keys carry a fresh run id per case, so cases never see each other's
//! records, even on a shared database.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotent_tools::{Call, ConflictReason, Error, Fingerprint, Key, Outcome, Run, Store};
use serde::{Deserialize, Serialize};
use tokio::sync::{Barrier, Notify};

/// How long a case may wait for something that must happen. Reaching it is a
/// failure, never a synchronisation.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The tool's error type.
#[derive(Debug, thiserror::Error, Serialize, Deserialize, Clone)]
pub enum PayError {
    #[error("declined: {0}")]
    Declined(String),
    #[error("idempotency: {0}")]
    Idempotency(String),
    #[serde(skip)]
    #[error("guard")]
    Guard(#[source] Arc<Error>),
}

impl From<Error> for PayError {
    fn from(err: Error) -> PayError {
        PayError::Guard(Arc::new(err))
    }
}

impl PartialEq for PayError {
    fn eq(&self, other: &PayError) -> bool {
        match (self, other) {
            (PayError::Declined(a), PayError::Declined(b)) => a == b,
            (PayError::Idempotency(a), PayError::Idempotency(b)) => a == b,
            (PayError::Guard(a), PayError::Guard(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl PayError {
    pub fn guard(&self) -> Option<&Error> {
        match self {
            PayError::Guard(err) => Some(err),
            _ => None,
        }
    }
}

/// A refund as the stand-in provider returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refund {
    pub id: String,
    pub order_id: String,
    pub usd: u64,
}

/// A stand-in provider that counts every refund that reached it.
#[derive(Default)]
pub struct Provider {
    refunds: AtomicUsize,
}

impl Provider {
    pub fn refund(&self, order_id: &str, usd: u64) -> Refund {
        let n = self.refunds.fetch_add(1, Ordering::SeqCst) + 1;
        Refund {
            id: format!("re_{n}"),
            order_id: order_id.to_owned(),
            usd,
        }
    }

    pub fn refunds(&self) -> usize {
        self.refunds.load(Ordering::SeqCst)
    }
}

/// A refund tool's action: one refund of `usd` on order 1182 at the provider.
pub async fn refunds(provider: &Provider, usd: u64) -> Result<Refund, PayError> {
    Ok(provider.refund("1182", usd))
}

/// A run id no other case uses.
pub fn fresh_run() -> Run {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Run::new(format!("run-{}-{nanos}-{n}", std::process::id())).expect("non-empty")
}

pub fn refund_key(run: &Run, order_id: &str) -> Key {
    Key::builder()
        .part("run", run)
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("order_id", order_id))
        .and_then(|b| b.finish())
        .expect("valid key")
}

pub fn usd(usd: u64) -> Fingerprint {
    Fingerprint::builder()
        .arg("usd", &usd)
        .expect("fingerprint")
        .finish()
}

/// A refund call as a tool would make it.
pub fn refund_call(store: &Arc<dyn Store>, run: &Run, order_id: &str, amount: u64) -> Call {
    Call::new("shop::refund_order", refund_key(run, order_id))
        .fingerprint(usd(amount))
        .store(store)
}

async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(PATIENCE, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what} did not happen within {PATIENCE:?}"),
    }
}

/// How a held action ends once it is told to finish.
#[derive(Clone, Copy)]
pub enum Ends {
    /// It refunds order 1182 for 42 at the provider.
    Refunding,
    /// It fails without reaching the provider.
    Failing,
}

/// A refund call in flight: its action is running and waits to be told to
/// finish, so a case can act while the claim is held.
pub struct Holder {
    finish: Arc<Notify>,
    task: tokio::task::JoinHandle<Result<Outcome<Refund>, PayError>>,
}

impl Holder {
    /// Starts `call` on its own task and returns once its action runs.
    pub async fn start(call: Call, provider: Arc<Provider>, ends: Ends) -> Holder {
        let entered = Arc::new(Notify::new());
        let finish = Arc::new(Notify::new());
        let task = {
            let (entered, finish) = (entered.clone(), finish.clone());
            tokio::spawn(async move {
                call.run(async {
                    entered.notify_one();
                    finish.notified().await;
                    match ends {
                        Ends::Refunding => Ok(provider.refund("1182", 42)),
                        Ends::Failing => Err(PayError::Declined("timeout".into())),
                    }
                })
                .await
            })
        };
        within("the holder acting", entered.notified()).await;
        Holder { finish, task }
    }

    /// Lets the action finish and returns the holder's result.
    pub async fn finish(self) -> Result<Outcome<Refund>, PayError> {
        self.finish.notify_one();
        within("the holder", self.task).await.expect("task")
    }
}

pub async fn concurrent_identical_calls_act_once(store: Arc<dyn Store>, callers: usize) {
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let start = Arc::new(Barrier::new(callers));
    let mut tasks = Vec::with_capacity(callers);
    for _ in 0..callers {
        let (store, run, provider, start) =
            (store.clone(), run.clone(), provider.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            refund_call(&store, &run, "1182", 42)
                .run(async {
                    // Let the other callers reach their claim while this one
                    // is in flight.
                    for _ in 0..10 {
                        tokio::task::yield_now().await;
                    }
                    Ok::<_, PayError>(provider.refund("1182", 42))
                })
                .await
        }));
    }
    let mut fresh = 0;
    let mut values = Vec::with_capacity(callers);
    for task in tasks {
        let outcome = within("a caller", task)
            .await
            .expect("task")
            .expect("outcome");
        fresh += usize::from(outcome.is_fresh());
        assert!(outcome.is_fresh() || outcome.is_replay(), "{outcome:?}");
        values.push(outcome.into_value().expect("value"));
    }
    assert_eq!(provider.refunds(), 1, "the action ran more than once");
    assert_eq!(fresh, 1, "exactly one caller must see a fresh result");
    assert!(
        values.iter().all(|v| *v == values[0]),
        "callers saw different results"
    );
}

pub async fn distinct_keys_run_in_parallel(store: Arc<dyn Store>) {
    let run = fresh_run();
    let both_inside = Arc::new(Barrier::new(2));
    let call = |order: &'static str| {
        let (store, run, both_inside) = (store.clone(), run.clone(), both_inside.clone());
        tokio::spawn(async move {
            refund_call(&store, &run, order, 42)
                .run(async move {
                    // Passes only if the other action is running at the same time.
                    both_inside.wait().await;
                    Ok::<_, PayError>(order.to_owned())
                })
                .await
        })
    };
    let (a, b) = (call("1"), call("2"));
    let (a, b) = within("two actions overlapping", async { (a.await, b.await) }).await;
    assert!(a.expect("task").expect("outcome").is_fresh());
    assert!(b.expect("task").expect("outcome").is_fresh());
}

pub async fn a_repeat_after_completion_replays_the_first_result(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Provider::default();
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("first");
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("again");
    assert_eq!(provider.refunds(), 1);
    assert!(first.is_fresh());
    match again {
        Outcome::Replay { value, note } => {
            assert_eq!(Some(&value), first.value());
            assert!(!note.is_empty());
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

pub async fn a_replay_returns_the_recorded_value_exactly(store: Arc<dyn Store>) {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Receipt {
        text: String,
        nested: Vec<Option<Vec<(u32, String)>>>,
        big: String,
        amount: i64,
    }
    let receipt = Receipt {
        text: "remboursé ✓ 退款 \u{1F4B8} \"quoted\" \\ back\nslash".into(),
        nested: vec![None, Some(vec![(1, "a".into()), (u32::MAX, "ü".into())])],
        big: "x".repeat(256 * 1024),
        amount: i64::MIN,
    };
    let run = fresh_run();
    let call = || Call::new("shop::receipt", refund_key(&run, "1182")).store(&store);
    let first = call()
        .run(async { Ok::<_, PayError>(receipt.clone()) })
        .await
        .expect("first");
    let again = call()
        .run(async { must_not_act::<Receipt>() })
        .await
        .expect("again");
    assert!(first.is_fresh());
    assert!(again.is_replay());
    assert_eq!(again.into_value(), Some(receipt));
}

pub async fn an_error_releases_the_claim_and_a_retry_acts(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Provider::default();
    let failed = refund_call(&store, &run, "1182", 42)
        .run(async {
            provider.refund("1182", 42);
            Err::<Refund, _>(PayError::Declined("network".into()))
        })
        .await;
    assert!(matches!(failed, Err(PayError::Declined(_))));
    let retry = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("retry");
    assert!(retry.is_fresh(), "the retry after an error must act");
    assert_eq!(provider.refunds(), 2);
}

pub async fn waiters_take_over_once_when_the_holder_fails(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42),
        provider.clone(),
        Ends::Failing,
    )
    .await;
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
            tokio::spawn(async move {
                refund_call(&store, &run, "1182", 42)
                    .run(refunds(&provider, 42))
                    .await
            })
        })
        .collect();
    let held = holder.finish().await;
    assert!(matches!(held, Err(PayError::Declined(_))));
    let mut fresh = 0;
    for waiter in waiters {
        let outcome = within("a waiter", waiter)
            .await
            .expect("task")
            .expect("outcome");
        fresh += usize::from(outcome.is_fresh());
    }
    assert_eq!(fresh, 1, "exactly one waiter takes over");
    assert_eq!(
        provider.refunds(),
        1,
        "the failed holder never reached the provider"
    );
}

pub async fn a_panic_releases_the_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Provider::default();
    let panicked = {
        let (store, run) = (store.clone(), run.clone());
        tokio::spawn(async move {
            refund_call(&store, &run, "1182", 42)
                .run(async { crash::<Refund>() })
                .await
        })
    };
    let joined = within("the panicking call", panicked).await;
    assert!(joined.expect_err("must panic").is_panic());
    let retry = within(
        "the retry after a panic",
        refund_call(&store, &run, "1182", 42).run(refunds(&provider, 42)),
    )
    .await
    .expect("retry");
    assert!(retry.is_fresh(), "a panic must release the claim");
    assert_eq!(provider.refunds(), 1);
}

fn crash<T>() -> Result<T, PayError> {
    panic!("the tool crashed mid-action")
}

fn must_not_act<T>() -> Result<T, PayError> {
    panic!("a replay must not act")
}

pub async fn a_future_dropped_by_timeout_releases_the_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Provider::default();
    let entered = Notify::new();
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        refund_call(&store, &run, "1182", 42).run(async {
            entered.notify_one();
            std::future::pending::<Result<Refund, PayError>>().await
        }),
    )
    .await;
    assert!(dropped.is_err(), "the call must have been cut off");
    let retry = within(
        "the retry after a timeout",
        refund_call(&store, &run, "1182", 42).run(refunds(&provider, 42)),
    )
    .await
    .expect("retry");
    assert!(retry.is_fresh(), "a dropped future must release the claim");
    assert_eq!(provider.refunds(), 1);
}

pub async fn a_future_dropped_by_select_releases_the_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Provider::default();
    let entered = Notify::new();
    let call = refund_call(&store, &run, "1182", 42).run(async {
        entered.notify_one();
        std::future::pending::<Result<Refund, PayError>>().await
    });
    tokio::select! {
        _ = call => panic!("the action never finishes"),
        () = entered.notified() => {}
    }
    let retry = within(
        "the retry after select! dropped the call",
        refund_call(&store, &run, "1182", 42).run(refunds(&provider, 42)),
    )
    .await
    .expect("retry");
    assert!(retry.is_fresh());
    assert_eq!(provider.refunds(), 1);
}

pub async fn other_arguments_after_completion_conflict_with_the_first_result(
    store: Arc<dyn Store>,
) {
    let run = fresh_run();
    let provider = Provider::default();
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("first");
    let other = refund_call(&store, &run, "1182", 41)
        .run(refunds(&provider, 41))
        .await
        .expect("second");
    assert_eq!(provider.refunds(), 1);
    match other {
        Outcome::Conflict {
            first: Some(value),
            reason: ConflictReason::Arguments,
            note,
        } => {
            assert_eq!(Some(&value), first.value());
            assert!(!note.is_empty());
        }
        other => panic!("expected a conflict carrying the first result, got {other:?}"),
    }
}

pub async fn other_arguments_in_flight_conflict_without_acting(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    let other = refund_call(&store, &run, "1182", 41)
        .run(refunds(&provider, 41))
        .await
        .expect("second");
    assert!(
        matches!(
            other,
            Outcome::Conflict {
                reason: ConflictReason::Arguments,
                ..
            }
        ),
        "{other:?}"
    );
    assert!(holder.finish().await.expect("first").is_fresh());
    assert_eq!(provider.refunds(), 1);
}

pub async fn another_tool_with_the_same_key_conflicts_without_its_result(store: Arc<dyn Store>) {
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let first = Call::new("shop::refund_order", key.clone())
        .store(&store)
        .run(async { Ok::<_, PayError>("refund re_1".to_owned()) })
        .await
        .expect("first");
    assert!(first.is_fresh());
    let other = Call::new("mail::send_receipt", key)
        .store(&store)
        .run(async { Ok::<_, PayError>("mail sent".to_owned()) })
        .await
        .expect("other");
    match other {
        Outcome::Conflict {
            first: None,
            reason: ConflictReason::OtherTool,
            ..
        } => {}
        other => panic!("expected a conflict without the other tool's result, got {other:?}"),
    }
}

pub async fn using_a_key_inside_its_own_action_fails_at_once(store: Arc<dyn Store>) {
    let run = fresh_run();
    let inner_store = store.clone();
    let inner_run = run.clone();
    let outer = within(
        "the re-entrant call",
        refund_call(&store, &run, "1182", 42).run(async move {
            let inner = refund_call(&inner_store, &inner_run, "1182", 42)
                .run(async { Ok::<_, PayError>(0u32) })
                .await;
            let reentrant =
                matches!(&inner, Err(err) if matches!(err.guard(), Some(Error::Reentrant { .. })));
            Ok::<bool, PayError>(reentrant)
        }),
    )
    .await
    .expect("outer");
    assert_eq!(
        outer.into_value(),
        Some(true),
        "the inner call must fail with Reentrant"
    );
}

pub async fn a_duplicate_past_the_wait_deadline_is_in_progress(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    let late = refund_call(&store, &run, "1182", 42)
        .wait(Duration::from_millis(100))
        .run(refunds(&provider, 42))
        .await;
    match late {
        Err(err) => assert!(
            matches!(err.guard(), Some(Error::InProgress { .. })),
            "{err:?}"
        ),
        Ok(outcome) => panic!("expected InProgress, got {outcome:?}"),
    }
    let _ = holder.finish().await.expect("first");
    assert_eq!(provider.refunds(), 1);
}

pub async fn recorded_errors_replay_without_acting(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Provider::default();
    let attempt = || {
        refund_call(&store, &run, "1182", 42).run_recording_errors(async {
            provider.refund("1182", 42);
            Err::<Refund, _>(PayError::Declined("card declined".into()))
        })
    };
    let first = attempt().await;
    let again = attempt().await;
    assert_eq!(first, Err(PayError::Declined("card declined".into())));
    assert_eq!(again, Err(PayError::Declined("card declined".into())));
    assert_eq!(provider.refunds(), 1, "a recorded error is final");
}

pub async fn a_record_past_its_retention_is_acted_again(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Provider::default();
    for _ in 0..2 {
        let outcome = refund_call(&store, &run, "1182", 42)
            .retention(Duration::ZERO)
            .run(refunds(&provider, 42))
            .await
            .expect("outcome");
        assert!(outcome.is_fresh());
    }
    assert_eq!(provider.refunds(), 2);
}

pub async fn a_purge_never_removes_a_held_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42).retention(Duration::ZERO),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    store.purge_expired().await.expect("purge");
    let during = refund_call(&store, &run, "1182", 42)
        .wait(Duration::from_millis(100))
        .run(refunds(&provider, 42))
        .await;
    assert!(
        matches!(&during, Err(err) if matches!(err.guard(), Some(Error::InProgress { .. }))),
        "the held claim must survive the purge: {during:?}"
    );
    let _ = holder.finish().await.expect("first");
    assert_eq!(provider.refunds(), 1);
    assert!(store.purge_expired().await.expect("purge") >= 1);
}

pub async fn the_action_sees_its_own_key(store: Arc<dyn Store>) {
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let seen = Call::new("shop::refund_order", key.clone())
        .store(&store)
        .run(async { Ok::<_, PayError>(idempotent_tools::current_key().map(|k| k.to_string())) })
        .await
        .expect("outcome");
    assert_eq!(seen.into_value().flatten(), Some(key.to_string()));
}

/// Instantiates every case above as a test, on a multi-thread runtime.
#[macro_export]
macro_rules! adversarial_suite {
    ($make:expr) => {
        $crate::adversarial_suite!($make, callers = 1000);
    };
    ($make:expr, callers = $callers:expr) => {
        $crate::adversarial_suite!(@list tests, $make, $callers);
    };
    // An expression: every case as a trial that needs `$needs` set.
    (trials $needs:expr, $make:expr, callers = $callers:expr) => {
        $crate::adversarial_suite!(@list trials $needs, $make, $callers)
    };
    (@list $($how:tt)*) => {
        $crate::adversarial_suite!{@cases $($how)*,
            distinct_keys_run_in_parallel,
            a_repeat_after_completion_replays_the_first_result,
            a_replay_returns_the_recorded_value_exactly,
            an_error_releases_the_claim_and_a_retry_acts,
            waiters_take_over_once_when_the_holder_fails,
            a_panic_releases_the_claim,
            a_future_dropped_by_timeout_releases_the_claim,
            a_future_dropped_by_select_releases_the_claim,
            other_arguments_after_completion_conflict_with_the_first_result,
            other_arguments_in_flight_conflict_without_acting,
            another_tool_with_the_same_key_conflicts_without_its_result,
            using_a_key_inside_its_own_action_fails_at_once,
            a_duplicate_past_the_wait_deadline_is_in_progress,
            recorded_errors_replay_without_acting,
            a_record_past_its_retention_is_acted_again,
            a_purge_never_removes_a_held_claim,
            the_action_sees_its_own_key,
        }
    };
    (@cases trials $needs:expr, $make:expr, $callers:expr, $($case:ident),* $(,)?) => {
        vec![
            $crate::harness::trial("concurrent_identical_calls_act_once", $needs, || async {
                let store = $make.await.expect("a store");
                adversarial::concurrent_identical_calls_act_once(store, $callers).await;
            }),
            $($crate::harness::trial(stringify!($case), $needs, || async {
                let store = $make.await.expect("a store");
                adversarial::$case(store).await;
            }),)*
        ]
    };
    (@cases tests, $make:expr, $callers:expr, $($case:ident),* $(,)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn concurrent_identical_calls_act_once() {
            let Some(store) = $make.await else { return };
            adversarial::concurrent_identical_calls_act_once(store, $callers).await;
        }
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(store) = $make.await else { return };
                adversarial::$case(store).await;
            }
        )*
    };
}
