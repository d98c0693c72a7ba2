//! What every case is made of: a stand-in provider that counts the refunds
//! that reached it, the refund call a tool makes, fresh runs so that cases
//! never see each other's records, and the store-level steps (claim,
//! complete) that the durable cases take by hand.
//!
//! A store's own tests use these too, so that they read like the suite's:
//! with them, claims [racing for one key](race_for_one_key) from several
//! connections, and an error's causes [printed once](assert_each_cause_once).

mod errors;
mod racing;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use idempotent_tools::{
    Classify, Error, Failure, Outcome, Run,
    call::{Call, Fingerprint, Key, ToolId},
    records::RecordState,
    store::{
        Claim, ClaimAnswer, ClaimRequest, Completion, RecordValue, Store, StoreError, StoreResult,
        Wait,
    },
};

pub use errors::{assert_each_cause_once, error_chain};
pub use racing::{RACING_CLAIMS, race_for_one_key};

/// How long a case may wait for something that must happen. Reaching it is a
/// failure, never a synchronisation.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The tool every refund here is made for.
pub static TOOL: ToolId = ToolId::new("shop::refund_order");

/// The refund tool's error type: a refusal by the provider, or the guard's
/// own error.
#[derive(Debug, thiserror::Error, Serialize, Deserialize, Clone)]
pub enum RefundError {
    /// The provider declined the refund.
    #[error("declined: {0}")]
    Declined(String),
    /// The provider did not answer in time: the refund may have happened.
    #[error("the provider did not answer in time")]
    TimedOut,
    /// The guard refused or failed; never recorded.
    #[serde(skip)]
    #[error("the guard refused the refund")]
    Guard(#[source] Arc<Error>),
}

impl From<Error> for RefundError {
    fn from(err: Error) -> RefundError {
        RefundError::Guard(Arc::new(err))
    }
}

impl PartialEq for RefundError {
    fn eq(&self, other: &RefundError) -> bool {
        match (self, other) {
            (RefundError::Declined(a), RefundError::Declined(b)) => a == b,
            (RefundError::Guard(a), RefundError::Guard(b)) => Arc::ptr_eq(a, b),
            (RefundError::TimedOut, RefundError::TimedOut) => true,
            _ => false,
        }
    }
}

impl RefundError {
    /// The guard's error, if this is one.
    pub fn guard(&self) -> Option<&Error> {
        match self {
            RefundError::Guard(err) => Some(err),
            RefundError::Declined(_) | RefundError::TimedOut => None,
        }
    }
}

/// A timeout may come after the provider acted; a refusal, and the guard's
/// own errors, are definite.
impl Classify for RefundError {
    fn failure(&self) -> Failure {
        match self {
            RefundError::TimedOut => Failure::Unknown,
            RefundError::Declined(_) | RefundError::Guard(_) => Failure::Definite,
        }
    }
}

/// A refund as the stand-in provider returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refunded {
    /// The provider's id for it: `re_1`, `re_2`, ...
    pub id: String,
    /// The order refunded.
    pub order_id: String,
    /// The amount, in dollars.
    pub usd: u64,
}

/// A stand-in provider that counts every refund that reached it: the count
/// is what a case asserts on, since it is what a customer would see. It
/// takes no idempotency key, and lists the refunds of an order when asked.
#[derive(Debug, Default)]
pub struct CountingProvider {
    refunds: AtomicUsize,
    made: Mutex<Vec<Refunded>>,
}

impl CountingProvider {
    /// Makes one refund and counts it.
    pub fn refund(&self, order_id: &str, usd: u64) -> Refunded {
        let n = self.refunds.fetch_add(1, Ordering::SeqCst) + 1;
        let refunded = Refunded {
            id: format!("re_{n}"),
            order_id: order_id.to_owned(),
            usd,
        };
        self.made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(refunded.clone());
        refunded
    }

    /// The first refund made on `order_id`, as a lookup of the provider's
    /// would find it.
    pub fn refund_of(&self, order_id: &str) -> Option<Refunded> {
        self.made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|refund| refund.order_id == order_id)
            .cloned()
    }

    /// How many refunds reached the provider.
    pub fn refunds(&self) -> usize {
        self.refunds.load(Ordering::SeqCst)
    }
}

/// A refund tool's action: one refund of `usd` on order 1182 at `provider`.
pub async fn refunds(provider: &CountingProvider, usd: u64) -> Result<Refunded, RefundError> {
    Ok(provider.refund("1182", usd))
}

/// An id no other call returns, in this process or another, nor in an
/// earlier run of the tests: `<process>_<nanoseconds>_<count>`, letters of
/// a name in a key, a schema or a Redis prefix alike.
pub fn unique_id() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or_default();
    format!(
        "{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A run id no other case uses, in this process or another.
pub fn fresh_run() -> Run {
    Run::new(format!("run-{}", unique_id())).expect("a non-empty run id")
}

/// The key a refund tool builds: `<run>:refund:<order_id>`.
pub fn refund_key(run: &Run, order_id: &str) -> Key {
    Key::builder()
        .part("run", run)
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("order_id", order_id))
        .and_then(|b| b.finish())
        .expect("a valid key")
}

/// The fingerprint of a refund's arguments: its amount.
pub fn usd(usd: u64) -> Fingerprint {
    Fingerprint::builder()
        .arg("usd", &usd)
        .expect("a fingerprint")
        .finish()
}

/// A refund call as a tool would make it.
pub fn refund_call(store: &Arc<dyn Store>, run: &Run, order_id: &str, amount: u64) -> Call {
    Call::new(TOOL.as_str(), refund_key(run, order_id))
        .fingerprint(usd(amount))
        .store(store)
}

/// A claim for [`TOOL`] with an amount of 42 and an hour's retention.
pub fn request(key: &Key, lease: Duration) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        tool: &TOOL,
        fingerprint: usd(42),
        lease,
        retention: Duration::from_secs(3600),
    }
}

/// A completion that leaves the record done, with `json` as its result.
pub fn done(json: &str) -> Completion {
    Completion {
        state: RecordState::Done,
        value: RecordValue::from_json(json),
        completed_at: SystemTime::now(),
    }
}

/// Claims, and fails unless the claim is now held.
pub async fn claimed(store: &dyn Store, req: ClaimRequest<'_>) -> Claim {
    match store.claim(req).await.expect("claim") {
        ClaimAnswer::Claimed(claim) => claim,
        other => panic!("expected to hold the claim, got {other:?}"),
    }
}

/// Claims a key someone else holds, and returns the wait.
pub async fn in_flight(store: &dyn Store, key: &Key) -> Wait {
    match store
        .claim(request(key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimAnswer::InFlight(woken) => woken,
        other => panic!("expected the claim in flight, got {other:?}"),
    }
}

/// Refunds order 1182 of `run` through `store`, which must refuse as
/// unavailable without the action ever reaching `provider`.
pub async fn refused_as_unavailable(
    store: &Arc<dyn Store>,
    run: &Run,
    provider: &CountingProvider,
) {
    let refused = refund_call(store, run, "1182", 42)
        .run(refunds(provider, 42))
        .await;
    match &refused {
        Err(err) => assert!(
            matches!(err.guard(), Some(Error::Store(StoreError::Unavailable(_)))),
            "{err:?}"
        ),
        Ok(outcome) => panic!("the action ran without a claim: {outcome:?}"),
    }
    assert_eq!(provider.refunds(), 0, "no action may run without a claim");
}

/// Refunds order 1182 of `run` through `store`, whose server must refuse
/// the claim with an error of its own ([`StoreError::Backend`]) without the
/// action ever reaching `provider`.
pub async fn refused_by_the_server(store: &Arc<dyn Store>, run: &Run, provider: &CountingProvider) {
    let refused = refund_call(store, run, "1182", 42)
        .run(refunds(provider, 42))
        .await;
    match &refused {
        Err(err) => {
            let guard = err.guard().expect("a guard error");
            assert!(
                matches!(guard, Error::Store(StoreError::Backend(_))),
                "{guard:?}"
            );
            assert_eq!(guard.action_ran(), Some(false));
            assert_each_cause_once(&error_chain(guard));
        }
        Ok(outcome) => panic!("the action ran without a claim: {outcome:?}"),
    }
    assert_eq!(provider.refunds(), 0, "no action may run without a claim");
}

/// Refunds order 1182 of a fresh run through `store`, whose server
/// `take_down` stops while the action runs, for good: the completion is
/// tried again until the call's lease (500 ms) would run out, then the call
/// fails with [`Error::NotRecorded`], unavailable, saying the action ran,
/// each cause printed once. For a store built to give up on a broken
/// connection well within the lease.
pub async fn not_recorded_once_down(
    store: &Arc<dyn Store>,
    provider: &Arc<CountingProvider>,
    take_down: impl FnOnce(),
) {
    let (entered, finish) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let call = {
        let call = refund_call(store, &fresh_run(), "1182", 42).lease(Duration::from_millis(500));
        let (entered, finish, provider) = (entered.clone(), finish.clone(), provider.clone());
        tokio::spawn(async move {
            call.run(async {
                entered.notify_one();
                finish.notified().await;
                Ok::<_, RefundError>(provider.refund("1182", 42))
            })
            .await
        })
    };
    within("the action", entered.notified()).await;
    take_down();
    finish.notify_one();
    let err = within("the call's end", call)
        .await
        .expect("the call's task")
        .expect_err("a completion the store never took");
    let err = err.guard().expect("a guard error");
    assert!(
        matches!(
            err,
            Error::NotRecorded {
                cause: StoreError::Unavailable(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.action_ran(), Some(true));
    assert_each_cause_once(&error_chain(err));
    assert_eq!(provider.refunds(), 1, "the action ran once");
}

pub use super::restarts::measure_first_calls_after_restarts;

/// Times 200 fresh calls and their replays through `store`, and prints the
/// means (`measured: ...`), for a store's own latency figures.
pub async fn measure_latency_of_a_guarded_call(store: Arc<dyn Store>) {
    let run = fresh_run();
    let n = 200u32;
    let started = std::time::Instant::now();
    for order in 0..n {
        let _ = refund_call(&store, &run, &order.to_string(), 42)
            .run(async { Ok::<_, RefundError>(order) })
            .await
            .expect("fresh");
    }
    let fresh = started.elapsed() / n;
    let started = std::time::Instant::now();
    for order in 0..n {
        let outcome = refund_call(&store, &run, &order.to_string(), 42)
            .run(async { Ok::<_, RefundError>(order) })
            .await
            .expect("replay");
        assert!(outcome.is_replay());
    }
    let replay = started.elapsed() / n;
    println!("measured: a fresh call (claim + complete) {fresh:?}, a replay {replay:?}");
}

/// Awaits `fut`, failing the case if it takes longer than [`PATIENCE`].
pub(crate) async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(PATIENCE, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what} did not happen within {PATIENCE:?}"),
    }
}

/// What ends a case on a step the store does not offer: the case is
/// reported ignored, with this reason, not passed.
pub(crate) struct NotOffered(pub(crate) String);

/// Ends the case as ignored because the store does not offer `what`. It
/// unwinds without the panic hook: an ignored case prints nothing.
pub(crate) fn not_offered(what: &str) -> ! {
    std::panic::resume_unwind(Box::new(NotOffered(format!(
        "the store does not offer {what}: the case is ignored"
    ))))
}

/// The value of an inspection step, or the end of the case, reported
/// ignored, if the store does not offer the step.
pub(crate) fn offered<T>(step: StoreResult<T>) -> T {
    match step {
        Ok(value) => value,
        Err(StoreError::Unsupported(step)) => {
            not_offered(&format!("`{step}` (StoreError::Unsupported)"))
        }
        Err(err) => panic!("the store failed: {err:?}"),
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
    task: tokio::task::JoinHandle<Result<Outcome<Refunded>, RefundError>>,
}

impl Holder {
    /// Starts `call` on its own task and returns once its action runs.
    pub async fn start(call: Call, provider: Arc<CountingProvider>, ends: Ends) -> Holder {
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
                        Ends::Failing => Err(RefundError::Declined("timeout".into())),
                    }
                })
                .await
            })
        };
        within("the holder acting", entered.notified()).await;
        Holder { finish, task }
    }

    /// Lets the action finish and returns the holder's result.
    pub async fn finish(self) -> Result<Outcome<Refunded>, RefundError> {
        self.finish.notify_one();
        within("the holder", self.task).await.expect("task")
    }
}
