//! Storm on a refund tool whose provider ignores idempotency keys and
//! fails once it acted (its connection drops, its answer times out), and
//! whose lookup lags behind its refunds.
//!
//! - With its errors classified and a verification that asks the provider,
//!   the tool refunds once per order on every store.
//! - Without them, storm finds the second refund: the case expects it; so
//!   it does with a verification that trusts "not applied" before the
//!   lookup caught up.
//! - A caller dropped (cancelled) once the provider acted leaves its claim
//!   held while the guard asks the provider on a task of its own: the
//!   verifying storms keep that trouble in.
//!
//! The Postgres and Redis cases need `IDEMPOTENT_POSTGRES_URL` and
//! `IDEMPOTENT_REDIS_URL`: without them they are reported as ignored, and
//! in CI they fail.

mod harness;
mod storm_stores;

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::call::{Call, Fingerprint, Key, Policy};
use idempotent_tools::store::Store;
use idempotent_tools::{Classify, Failure, MemoryStore, Outcome, Run, Verified};
use idempotent_tools_testing::storm::{Answered, Ask, Report, Storm, Trouble, Violation};
use idempotent_tools_testing::{Lag, Provider, ProviderError, Refund};

#[cfg(feature = "postgres")]
use storm_stores::postgres;
#[cfg(feature = "redis")]
use storm_stores::redis;
use storm_stores::sqlite;

const MEMORY_SCHEDULES: usize = 150;
const DURABLE_SCHEDULES: usize = 30;

/// How far the provider's lookup lags behind its refunds, and how long the
/// tool's verification waits before it trusts "not applied": at least as
/// long, however busy the machine.
const LAG: Duration = Duration::from_millis(20);
const SETTLE: Duration = Duration::from_millis(40);

fn policy() -> Policy {
    Policy {
        wait: Duration::from_secs(1),
        lease: Duration::from_millis(300),
        ..Policy::DEFAULT
    }
}

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// The provider's errors come after it may have acted; the guard's own are
/// definite.
impl Classify for PayError {
    fn failure(&self) -> Failure {
        match self {
            PayError::Provider(error) => error.failure(),
            PayError::Idempotency(_) => Failure::Definite,
        }
    }
}

fn guard_error(error: &PayError) -> Option<&idempotent_tools::Error> {
    match error {
        PayError::Idempotency(error) => Some(error),
        PayError::Provider(_) => None,
    }
}

/// How the tool handles a failure after the provider may have acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// `run_classified` with a verification that lists the order's refunds.
    Verifies,
    /// Plain `run`: every error releases the claim, and the retry acts.
    Releases,
}

/// The refund tool, built by hand: the guard's key is handed to the
/// provider, which ignores it.
async fn refund(
    provider: Provider,
    store: Arc<dyn Store>,
    ask: Ask,
    tool: Tool,
) -> Result<Outcome<Refund>, PayError> {
    let run = Run::current().ok_or(idempotent_tools::Error::MissingRun)?;
    let key = Key::builder()
        .part("run", &run)
        .and_then(|key| key.literal(":refund:"))
        .and_then(|key| key.part("order_id", &ask.object))
        .and_then(|key| key.finish())
        .map_err(idempotent_tools::Error::from)?;
    let usd = 40 + u64::from(ask.variant);
    let fingerprint = Fingerprint::builder()
        .arg("usd", &usd)
        .map_err(idempotent_tools::Error::from)?
        .finish();
    let call = Call::new("shop::refund", key)
        .fingerprint(fingerprint)
        .policy(policy())
        .store(store);
    let order = ask.object.clone();
    let action = {
        let provider = provider.clone();
        async move {
            let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
            Ok(provider.refund(&order, usd, key.as_deref()).await?)
        }
    };
    match tool {
        Tool::Releases => call.run(action).await,
        Tool::Verifies => {
            let order = ask.object;
            call.verify(move |_key| {
                let (provider, order) = (provider.clone(), order.clone());
                async move {
                    match provider.refund_of(&order).await {
                        Some(refund) if refund.usd == usd => Verified::Applied(refund),
                        Some(refund) => {
                            Verified::Contradicts(format!("{} refunded ${}", refund.id, refund.usd))
                        }
                        None => Verified::NotApplied,
                    }
                }
            })
            .settle(SETTLE)
            .run_classified(action)
            .await
        }
    }
}

/// A provider that ignores keys, and whose lookup lags by [`LAG`].
fn provider() -> Provider {
    Provider::with_delay(Duration::from_millis(2))
        .ignoring_keys()
        .with_lookup_lag(Lag::time(LAG))
}

/// A storm on the tool, against `provider`, which also fails once it acted,
/// on the store `open` gives.
fn storm<F, Fut>(tool: Tool, provider: &Provider, open: F) -> Storm<Refund, PayError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Arc<dyn Store>> + Send + 'static,
{
    let calls = provider.clone();
    Storm::new(move |store, ask: Ask| refund(calls.clone(), store, ask, tool))
        .provider(provider)
        .provider_faults()
        .guard_error(guard_error)
        .policy(&policy())
        .store(open)
}

/// The storm the verifying tool passes, with its provider: every trouble,
/// a caller cancelled once the provider acted among them.
fn verifying<F, Fut>(open: F) -> (Storm<Refund, PayError>, Provider)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Arc<dyn Store>> + Send + 'static,
{
    let provider = provider();
    let storm = storm(Tool::Verifies, &provider, open);
    (storm, provider)
}

fn memory() -> std::future::Ready<Arc<dyn Store>> {
    std::future::ready(Arc::new(MemoryStore::new()))
}

fn shared(store: Arc<dyn Store>) -> impl Fn() -> std::future::Ready<Arc<dyn Store>> {
    move || std::future::ready(Arc::clone(&store))
}

fn passed(report: &Report, provider: &Provider) {
    println!("{report}");
    report.assert_ok();
    assert!(
        provider.lookups_received() > 0,
        "the tool asked the provider"
    );
    let faults = [
        "connection drops",
        "answer times out",
        "dropped once the provider acted",
    ];
    for fault in faults {
        assert!(
            report.troubles.keys().any(|t| t.contains(fault)),
            "the storm explored the provider's failures: {report}"
        );
    }
}

async fn a_verifying_tool_refunds_once_on_memory() {
    let (storm, provider) = verifying(memory);
    let report = storm.schedules(MEMORY_SCHEDULES).run().await;
    passed(&report, &provider);
}

async fn a_verifying_tool_refunds_once_on_sqlite() {
    let (_dir, store) = sqlite();
    let (storm, provider) = verifying(shared(store));
    let report = storm.schedules(DURABLE_SCHEDULES).run().await;
    assert!(report.short_leases, "SQLite leases run out");
    passed(&report, &provider);
}

#[cfg(feature = "postgres")]
async fn a_verifying_tool_refunds_once_on_postgres() {
    let (store, drop_schema) = postgres().await;
    let (storm, provider) = verifying(shared(store));
    let report = storm.schedules(DURABLE_SCHEDULES).run().await;
    drop_schema().await;
    assert!(report.short_leases, "Postgres leases run out");
    passed(&report, &provider);
}

#[cfg(feature = "redis")]
async fn a_verifying_tool_refunds_once_on_redis() {
    let (store, delete_keys) = redis().await;
    let (storm, provider) = verifying(shared(store));
    let report = storm.schedules(DURABLE_SCHEDULES).run().await;
    delete_keys().await;
    assert!(report.short_leases, "Redis leases run out");
    passed(&report, &provider);
}

/// Whether the failure's shrunk schedule refunded an order twice.
fn refunds_twice(report: &Report) -> bool {
    report.failure.as_ref().is_some_and(|failure| {
        failure
            .violations
            .iter()
            .any(|v| matches!(v, Violation::EffectRepeated { .. }))
    })
}

/// Expected to fail: a tool that releases its claim on the provider's
/// error refunds again on the retry, as the provider ignores the key. The
/// storm finds it, shrinks it, and its seed replays it.
async fn without_verification_the_provider_refunds_twice() {
    let report = storm(Tool::Releases, &provider(), memory)
        .leave_out(Trouble::DroppedAfterActing)
        .run()
        .await;
    let text = report.to_string();
    println!("{text}");
    assert!(
        refunds_twice(&report),
        "storm finds the double refund: {text}"
    );
    let failure = report.failure.clone().expect("a failure");
    assert!(
        failure.shrunk.events.len() <= 3,
        "shrunk to a short schedule: {text}"
    );
    assert!(
        text.contains("the provider acts, then"),
        "a provider's failure once it acted led to it: {text}"
    );
    // Its seed replays it, the same way each time.
    let replays = (0..5).map(|_| {
        storm(Tool::Releases, &provider(), memory)
            .leave_out(Trouble::DroppedAfterActing)
            .replay(failure.seed)
            .run()
    });
    for replay in futures_util::future::join_all(replays).await {
        assert!(refunds_twice(&replay), "{replay}");
        let replayed = replay.failure.expect("the seed replays the failure");
        assert_eq!(replayed.original, failure.original);
    }
}

/// Expected to fail: a verification that trusts "not applied" before the
/// provider's lookup caught up (a settle time shorter than its lag) lets
/// the retry refund again.
async fn a_settle_shorter_than_the_lookups_lag_refunds_twice() {
    let provider = Provider::with_delay(Duration::from_millis(2))
        .ignoring_keys()
        .with_lookup_lag(Lag::time(SETTLE * 10));
    let report = storm(Tool::Verifies, &provider, memory)
        .leave_out(Trouble::DroppedAfterActing)
        .run()
        .await;
    let text = report.to_string();
    println!("{text}");
    assert!(
        refunds_twice(&report),
        "storm finds the double refund: {text}"
    );
    let failure = report.failure.expect("a failure");
    assert!(
        failure
            .callers
            .iter()
            .any(|caller| matches!(caller.answered, Answered::ProviderFailed { .. })),
        "a provider's failure once it acted led to it: {text}"
    );
}

fn main() {
    let mut trials = trials!(always;
        a_verifying_tool_refunds_once_on_memory,
        a_verifying_tool_refunds_once_on_sqlite,
        without_verification_the_provider_refunds_twice,
        a_settle_shorter_than_the_lookups_lag_refunds_twice,
    );
    #[cfg(feature = "postgres")]
    trials.extend(trials!("IDEMPOTENT_POSTGRES_URL";
        a_verifying_tool_refunds_once_on_postgres,
    ));
    #[cfg(feature = "redis")]
    trials.extend(trials!("IDEMPOTENT_REDIS_URL";
        a_verifying_tool_refunds_once_on_redis,
    ));
    harness::main_waiting(trials)
}
