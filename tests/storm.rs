//! Storm on the project's own refund tool, on every store, with a fixed
//! budget of schedules; and storm finding three planted bugs: a tool written
//! check-then-act, a store wrapper that forgets to fence, and a tool that
//! keeps the guard's key from its provider (found with the defaults on
//! every store).
//!
//! The budget (seed [`DEFAULT_SEED`], the counts below) keeps the whole
//! target well under a minute; `guide/testing.md` gives the figures. The
//! Postgres and Redis cases need `IDEMPOTENT_POSTGRES_URL` and
//! `IDEMPOTENT_REDIS_URL`: without them they are reported as ignored, and
//! in CI they fail.

mod harness;
mod storm_stores;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idempotent_tools::call::Policy;
use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreError, StoreFuture, StoreResult,
};
use idempotent_tools::{MemoryStore, Outcome, SqliteStore, idempotent};
use idempotent_tools_testing::storm::{Ask, DEFAULT_SEED, Failure, Report, Storm, Violation};
use idempotent_tools_testing::{Provider, ProviderError, Refund};
#[cfg(feature = "postgres")]
use storm_stores::postgres;
#[cfg(feature = "redis")]
use storm_stores::redis;
use storm_stores::sqlite;

/// Schedules on the memory store, and on each durable store.
const MEMORY_SCHEDULES: usize = 300;
const DURABLE_SCHEDULES: usize = 40;

/// The wait and lease the refund tool below is declared with: short, so a
/// vanished holder's lease runs out within a schedule.
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

/// The example's refund tool (`examples/refund`), on the store it is given,
/// with the short wait and lease of [`policy`].
#[derive(Clone)]
struct Shop {
    provider: Provider,
    store: Arc<dyn Store>,
}

impl Shop {
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store, wait = "1s", lease = "300ms")]
    async fn refund_order(
        &self,
        order_id: String,
        usd: u64,
        #[free_text] _reason: String,
    ) -> Result<Outcome<Refund>, PayError> {
        let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
        Ok(self.provider.refund(&order_id, usd, key.as_deref()).await?)
    }
}

impl Shop {
    /// A planted bug: the same tool, but the provider is never handed the
    /// guard's key. A holder that acted and vanished is taken over by a
    /// caller that refunds again.
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store, wait = "1s", lease = "300ms")]
    async fn refund_without_provider_key(
        &self,
        order_id: String,
        usd: u64,
    ) -> Result<Outcome<Refund>, PayError> {
        Ok(self.provider.refund(&order_id, usd, None).await?)
    }
}

/// A storm on the refund tool, counting refunds at the provider.
fn refund_storm() -> Storm<Refund, PayError> {
    let provider = Provider::with_delay(Duration::from_millis(2));
    let tool = provider.clone();
    Storm::new(move |store, ask: Ask| {
        let shop = Shop {
            provider: tool.clone(),
            store,
        };
        async move {
            let usd = 40 + u64::from(ask.variant);
            shop.refund_order(ask.object, usd, "asked again".into())
                .await
        }
    })
    .provider(&provider)
    .guard_error(guard_error)
    .policy(&policy())
}

fn guard_error(error: &PayError) -> Option<&idempotent_tools::Error> {
    match error {
        PayError::Idempotency(error) => Some(error),
        PayError::Provider(_) => None,
    }
}

/// A storm with the defaults on the planted tool that keeps its key from
/// the provider, on the store `open` makes.
fn keyless_storm<F, Fut>(open: F) -> Storm<Refund, PayError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Arc<dyn Store>> + Send + 'static,
{
    let provider = Provider::with_delay(Duration::from_millis(2));
    let tool = provider.clone();
    Storm::new(move |store, ask: Ask| {
        let shop = Shop {
            provider: tool.clone(),
            store,
        };
        async move {
            let usd = 40 + u64::from(ask.variant);
            shop.refund_without_provider_key(ask.object, usd).await
        }
    })
    .provider(&provider)
    .guard_error(guard_error)
    .policy(&policy())
    .store(open)
}

/// The object's number in a failure, without the schedule's own tag:
/// `storm0` for `storm0-<id>`.
fn repeated_effects(failure: &Failure) -> Vec<String> {
    failure
        .violations
        .iter()
        .filter_map(|v| match v {
            Violation::EffectRepeated { object, .. } => object.split('-').next().map(str::to_owned),
            _ => None,
        })
        .collect()
}

async fn a_seed_replays_its_failure_every_time_and_shrinks_the_same_way() {
    // Two storms from the same seed find the same schedule, and shrink it
    // to the same one.
    let (_dirs, stores): (Vec<_>, Vec<_>) = (0..2).map(|_| sqlite()).unzip();
    let storms = stores.iter().map(|store| {
        let store = Arc::clone(store);
        keyless_storm(move || {
            let store = Arc::clone(&store);
            async move { store }
        })
        .run()
    });
    let reports = futures_util::future::join_all(storms).await;
    let text = reports[0].to_string();
    println!("{text}");
    let failure = reports[0]
        .failure
        .clone()
        .expect("storm finds the second refund");
    let again = reports[1].failure.clone().expect("and finds it again");
    assert_eq!(again.seed, failure.seed, "{text}");
    assert_eq!(
        again.shrunk, failure.shrunk,
        "shrinking is the same twice: {text}"
    );
    let broke = repeated_effects(&failure);
    assert!(!broke.is_empty(), "{text}");
    assert!(
        text.contains(&format!("STORM_SEED={}", failure.seed)),
        "{text}"
    );

    // Its seed replays that schedule, unshrunk, and fails the same way on
    // each of 30 replays, run at once on a busy machine.
    let (_dirs, stores): (Vec<_>, Vec<_>) = (0..30).map(|_| sqlite()).unzip();
    let replays = stores.iter().map(|store| {
        let store = Arc::clone(store);
        keyless_storm(move || {
            let store = Arc::clone(&store);
            async move { store }
        })
        .replay(failure.seed)
        .run()
    });
    let replays = futures_util::future::join_all(replays).await;
    let mut failed = 0;
    for replay in &replays {
        assert_eq!(replay.schedules, 1);
        let text = replay.to_string();
        assert!(text.starts_with("storm: 1 schedule,"), "{text}");
        let Some(replayed) = &replay.failure else {
            continue;
        };
        assert_eq!(replayed.original, failure.original);
        assert_eq!(replayed.shrink_runs, 0, "a replay is not shrunk again");
        if repeated_effects(replayed) == broke {
            failed += 1;
        }
    }
    assert_eq!(failed, 30, "the seed replays its failure in every replay");
}

/// A tool whose key leaves out the object: the storm says so at its first
/// claim, and waits for nothing.
async fn a_key_without_the_object_is_reported_at_once() {
    let provider = Provider::with_delay(Duration::from_millis(2));
    let tool = provider.clone();
    let started = std::time::Instant::now();
    let report = Storm::new(move |store, ask: Ask| {
        let provider = tool.clone();
        async move {
            let run =
                idempotent_tools::Run::current().ok_or(idempotent_tools::Error::MissingRun)?;
            // The order is missing from the key.
            let key = idempotent_tools::call::Key::builder()
                .part("run", &run)
                .and_then(|key| key.literal(":refund"))
                .and_then(|key| key.finish())
                .map_err(idempotent_tools::Error::from)?;
            idempotent_tools::call::Call::new("shop::refund", key)
                .policy(policy())
                .store(store)
                .run(async move {
                    provider
                        .refund(&ask.object, 42, None)
                        .await
                        .map_err(PayError::from)
                })
                .await
        }
    })
    .guard_error(guard_error)
    .provider(&provider)
    .policy(&policy())
    .run()
    .await;
    let text = report.to_string();
    println!("{text}");
    let failure = report
        .failure
        .expect("a key without the object is an error");
    assert_eq!(report.schedules, 1, "{text}");
    assert!(
        matches!(
            failure.violations.as_slice(),
            [Violation::KeyWithoutObject { .. }]
        ),
        "{text}"
    );
    assert!(text.contains("leaves out the object"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "no wait per ask: {text}"
    );
}

fn passed(report: Report) {
    println!("{report}");
    report.assert_ok();
}

async fn refund_tool_on_memory() {
    let report = refund_storm()
        .store(|| async { Arc::new(MemoryStore::new()) })
        .schedules(MEMORY_SCHEDULES)
        .run()
        .await;
    passed(report);
}

async fn refund_tool_on_sqlite() {
    let dir = tempfile::tempdir().expect("a directory");
    let store = Arc::new(SqliteStore::open(dir.path().join("claims.db")).expect("a store"));
    let report = refund_storm()
        .store(move || {
            let store = Arc::clone(&store);
            async move { store }
        })
        .schedules(DURABLE_SCHEDULES)
        .run()
        .await;
    assert!(report.short_leases, "SQLite leases run out");
    passed(report);
}

#[cfg(feature = "postgres")]
async fn refund_tool_on_postgres() {
    let (store, drop_schema) = postgres().await;
    let report = refund_storm()
        .store(move || {
            let store = Arc::clone(&store);
            async move { store }
        })
        .schedules(DURABLE_SCHEDULES)
        .run()
        .await;
    drop_schema().await;
    assert!(report.short_leases, "Postgres leases run out");
    passed(report);
}

#[cfg(feature = "redis")]
async fn refund_tool_on_redis() {
    let (store, delete_keys) = redis().await;
    let report = refund_storm()
        .store(move || {
            let store = Arc::clone(&store);
            async move { store }
        })
        .schedules(DURABLE_SCHEDULES)
        .run()
        .await;
    delete_keys().await;
    assert!(report.short_leases, "Redis leases run out");
    passed(report);
}

/// Storm with its default settings finds the planted tool that keeps its
/// key from the provider on `store`: a holder acted and vanished, or was
/// dropped once the provider acted, and the caller after it refunded again.
async fn finds_a_missing_provider_key(store: Arc<dyn Store>) -> Report {
    let report = keyless_storm(move || {
        let store = Arc::clone(&store);
        async move { store }
    })
    .run()
    .await;
    let text = report.to_string();
    println!("{text}");
    let failure = report
        .failure
        .as_ref()
        .expect("storm finds the second refund");
    assert!(!repeated_effects(failure).is_empty(), "{text}");
    assert!(
        failure.shrunk.events.len() <= 3,
        "shrunk to a short schedule: {text}"
    );
    report
}

async fn finds_a_missing_provider_key_on_memory() {
    // Its leases never run out, so no holder vanishes there; a caller
    // dropped once the provider acted finds it.
    finds_a_missing_provider_key(Arc::new(MemoryStore::new())).await;
}

async fn finds_a_missing_provider_key_on_sqlite() {
    let (_dir, store) = sqlite();
    let report = finds_a_missing_provider_key(store).await;
    assert!(report.short_leases, "SQLite leases run out");
}

#[cfg(feature = "postgres")]
async fn finds_a_missing_provider_key_on_postgres() {
    let (store, drop_schema) = postgres().await;
    finds_a_missing_provider_key(store).await;
    drop_schema().await;
}

#[cfg(feature = "redis")]
async fn finds_a_missing_provider_key_on_redis() {
    let (store, delete_keys) = redis().await;
    finds_a_missing_provider_key(store).await;
    delete_keys().await;
}

/// The refund tool as it is often written: look up, then refund, no guard.
async fn check_then_act(
    provider: Provider,
    refunded: Arc<Mutex<HashSet<String>>>,
    ask: Ask,
) -> Result<Outcome<Refund>, idempotent_tools::Error> {
    let done = |set: &Mutex<HashSet<String>>, order: &str| {
        set.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(order)
    };
    if done(&refunded, &ask.object) {
        return Ok(Outcome::Conflict {
            first: None,
            reason: idempotent_tools::call::ConflictReason::Arguments,
            note: "already refunded".into(),
        });
    }
    // While this call waits on the provider, another one makes the same check.
    let refund = provider
        .refund(&ask.object, 42, None)
        .await
        .map_err(|_| idempotent_tools::Error::MissingRun)?;
    refunded
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(ask.object);
    Ok(Outcome::Fresh { value: refund })
}

async fn finds_a_tool_written_check_then_act() {
    // The storm replays its schedule, but this tool's race is its own, in
    // real time: two callers of one order overlap only if the second checks
    // before the first's refund returns. The provider's latency is that
    // window, kept wide enough that a loaded machine's scheduling never
    // closes it, so that the seed replays the double refund.
    let provider = Provider::with_delay(Duration::from_millis(50));
    let refunded = Arc::new(Mutex::new(HashSet::new()));
    let storm = move || {
        let (tool, refunded) = (provider.clone(), Arc::clone(&refunded));
        Storm::new(move |_store, ask| check_then_act(tool.clone(), Arc::clone(&refunded), ask))
            .provider(&provider)
            .policy(&policy())
            .schedules(50)
    };
    let report = storm().run().await;
    let text = report.to_string();
    println!("{text}");
    let failure = report.failure.expect("storm finds the double refund");
    assert!(
        failure
            .violations
            .iter()
            .any(|v| matches!(v, Violation::EffectRepeated { .. })),
        "{text}"
    );
    assert!(
        failure.shrunk.events.len() <= 2,
        "shrunk to a short schedule: {text}"
    );
    assert!(
        text.contains(&format!("STORM_SEED={}", failure.seed)),
        "{text}"
    );

    // The seed replays it: the same schedule fails, and is not shrunk again.
    let again = storm().replay(failure.seed).run().await;
    let replayed = again.failure.expect("the seed replays the failure");
    assert_eq!(replayed.original, failure.original);
    assert_eq!(replayed.shrink_runs, 0);
}

/// A store wrapper that forgets to fence: a stale holder's completion is
/// answered as recorded, instead of [`StoreError::LeaseLost`].
struct ForgetsFence(Arc<dyn Store>);

impl Store for ForgetsFence {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        self.0.claim(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move {
            match self.0.complete(claim, finished).await {
                Err(StoreError::LeaseLost) => Ok(()),
                other => other,
            }
        })
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.0.release(claim)
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        self.0.renew(claim, lease)
    }
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        self.0.renew_every(lease)
    }
}

async fn finds_a_store_that_forgets_to_fence() {
    let dir = tempfile::tempdir().expect("a directory");
    let sqlite: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("claims.db")).expect("a store"));
    let store = Arc::new(ForgetsFence(sqlite));
    let storm = || {
        let store = Arc::clone(&store);
        refund_storm()
            .store(move || {
                let store = Arc::clone(&store);
                async move { store }
            })
            .objects(1)
            .schedules(100)
    };
    let report = storm().run().await;
    let text = report.to_string();
    println!("{text}");
    let failure = report.failure.expect("storm finds the stale completion");
    assert!(
        failure
            .violations
            .iter()
            .any(|v| matches!(v, Violation::FreshTwice { .. })),
        "{text}"
    );
    assert!(
        failure.shrunk.events.len() <= 3,
        "shrunk to a short schedule: {text}"
    );
    assert!(
        text.contains(&format!("STORM_SEED={}", failure.seed)),
        "{text}"
    );
    // The seed replays the schedule: the paused completion waits for the
    // takeover, so the stale completion lands after it on every run.
    let again = storm().replay(failure.seed).run().await;
    assert_eq!(again.schedules, 1);
    let replayed = again.failure.expect("the seed replays the failure");
    assert_eq!(replayed.original, failure.original);
    assert_eq!(replayed.shrink_runs, 0);
}

fn main() {
    let _ = DEFAULT_SEED;
    let mut trials = trials!(always;
        refund_tool_on_memory,
        refund_tool_on_sqlite,
        finds_a_tool_written_check_then_act,
        finds_a_store_that_forgets_to_fence,
        a_seed_replays_its_failure_every_time_and_shrinks_the_same_way,
        a_key_without_the_object_is_reported_at_once,
        finds_a_missing_provider_key_on_memory,
        finds_a_missing_provider_key_on_sqlite,
    );
    #[cfg(feature = "postgres")]
    trials.extend(trials!("IDEMPOTENT_POSTGRES_URL";
        refund_tool_on_postgres,
        finds_a_missing_provider_key_on_postgres,
    ));
    #[cfg(feature = "redis")]
    trials.extend(trials!("IDEMPOTENT_REDIS_URL";
        refund_tool_on_redis,
        finds_a_missing_provider_key_on_redis,
    ));
    harness::main_waiting(trials)
}
