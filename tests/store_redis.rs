//! The Redis store against a real server: the adversarial, cancellation,
//! durable and inspection suites, several OS processes with a `kill -9` of a
//! holder, and what is Redis's own: the key layout, retention by key expiry,
//! the eviction warning, wake-ups published only when someone waits, scripts
//! the server forgot, and `WAIT`.
//!
//! The server's address comes from `IDEMPOTENT_REDIS_URL`. Without it every
//! case is reported as ignored ("needs IDEMPOTENT_REDIS_URL"), except in CI,
//! where it fails. Every store gets a key prefix of its own, whose keys are
//! deleted afterwards.

mod adversarial;
mod cancellation;
mod durable;
mod harness;
mod inspection;
mod multiprocess;
mod redis_cases;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use durable::Durable;
use idempotent_tools::Store;
use idempotent_tools::store::RedisStore;
use idempotent_tools::store::redis::redis;
use multiprocess::Scene;

const URL: &str = "IDEMPOTENT_REDIS_URL";

/// The environment variable naming a child's key prefix.
const PREFIX: &str = "IDEMPOTENT_TEST_PREFIX";

/// The durable suite's batch purge, and the adversarial suite's purge of a
/// held claim, count what `purge_expired` removed. Records in Redis leave by
/// key expiry, so a purge removes nothing; `redis_cases` proves the same
/// promises (expired records gone, held claims kept) the Redis way.
const PURGES_BY_COUNT: [&str; 2] = [
    "a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records",
    "a_purge_never_removes_a_held_claim",
];

fn url() -> Option<String> {
    std::env::var(URL).ok()
}

/// A prefix no other run, case or process shares.
fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "idempotent-test:{}:{}:{}:",
        std::process::id(),
        nanos % 1_000_000_000_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A connection for the test's own commands.
async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("Redis at {URL} must be reachable: {e}"))
}

/// A key prefix of its own, whose keys are deleted when this is dropped.
struct Prefixed {
    url: String,
    prefix: String,
}

impl Prefixed {
    fn new() -> Option<Prefixed> {
        Some(Prefixed {
            url: url()?,
            prefix: unique_prefix(),
        })
    }

    async fn store(&self) -> RedisStore {
        RedisStore::builder(self.url.as_str())
            .prefix(self.prefix.as_str())
            .connect()
            .await
            .expect("a store")
    }

    /// Every key under the prefix.
    async fn keys(&self) -> Vec<String> {
        let mut admin = admin(&self.url).await;
        let pattern = format!("{}*", self.prefix);
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut admin)
            .await
            .expect("keys");
        keys.sort();
        keys
    }
}

impl Drop for Prefixed {
    fn drop(&mut self) {
        let (url, prefix) = (self.url.clone(), self.prefix.clone());
        // Dropped inside the test's runtime: clean up from a thread of its own.
        let cleaned = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let mut admin = admin(&url).await;
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query_async(&mut admin)
                    .await
                    .unwrap_or_default();
                if !keys.is_empty() {
                    let _: Result<i64, _> =
                        redis::cmd("DEL").arg(keys).query_async(&mut admin).await;
                }
            });
        });
        let _ = cleaned.join();
    }
}

/// A store that owns its prefix.
type InPrefix = durable::Held<RedisStore, Prefixed>;

impl Durable for RedisStore {
    fn statements(&self) -> u64 {
        self.round_trips()
    }
}

/// A store under a prefix of its own. Purges remove nothing in Redis, so
/// the batch size is not used.
async fn in_prefix(_purge_batch: Option<usize>) -> Option<InPrefix> {
    let place = Prefixed::new()?;
    let store = place.store().await;
    Some(InPrefix { store, place })
}

async fn redis_store() -> Option<Arc<dyn Store>> {
    let store: Arc<dyn Store> = Arc::new(in_prefix(None).await?);
    Some(store)
}

// Several processes on one server.

/// The entry point of the child processes that the multi-process cases
/// start: this test binary again, with a role to play.
fn child_process(role: &str) {
    let url = std::env::var(URL).expect("the server's URL");
    let prefix = std::env::var(PREFIX).expect("the prefix");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = RedisStore::builder(url)
            .prefix(prefix)
            .connect()
            .await
            .expect("store");
        assert!(store.listening().await, "the child listens for wake-ups");
        multiprocess::play(role, Arc::new(store)).await;
    });
}

/// Children under one prefix of their own.
struct PrefixedScene {
    place: Prefixed,
    scene: Scene,
}

impl PrefixedScene {
    fn new() -> Option<Arc<PrefixedScene>> {
        let place = Prefixed::new()?;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let scene = Scene::new(
            dir,
            vec![(URL, place.url.clone()), (PREFIX, place.prefix.clone())],
        );
        Some(Arc::new(PrefixedScene { place, scene }))
    }

    /// Plays `scenario` on a blocking thread, where it may wait for its
    /// children.
    async fn play(self: &Arc<PrefixedScene>, scenario: fn(&Scene)) {
        let this = self.clone();
        tokio::task::spawn_blocking(move || scenario(&this.scene))
            .await
            .expect("the processes");
    }
}

async fn six_processes_refunding_the_same_order_at_once_refund_it_once() {
    let Some(scene) = PrefixedScene::new() else {
        return;
    };
    scene
        .play(multiprocess::six_processes_refunding_the_same_order_at_once_refund_it_once)
        .await;
}

async fn a_holder_killed_mid_action_is_taken_over_once_after_its_lease() {
    let Some(scene) = PrefixedScene::new() else {
        return;
    };
    scene
        .play(multiprocess::a_holder_killed_mid_action_is_taken_over_once_after_its_lease)
        .await;
    let record = scene
        .place
        .store()
        .await
        .inspect(&scene.scene.key())
        .await
        .expect("inspect")
        .expect("the record");
    assert_eq!(
        (record.fence, record.taken_over),
        (2, true),
        "one takeover, one fence bump"
    );
}

async fn after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so() {
    let Some(scene) = PrefixedScene::new() else {
        return;
    };
    scene
        .play(multiprocess::after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so)
        .await;
}

async fn a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result() {
    let Some(scene) = PrefixedScene::new() else {
        return;
    };
    scene
        .play(multiprocess::a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result)
        .await;
}

fn main() {
    if let Some(role) = multiprocess::role() {
        child_process(&role);
        std::process::exit(0);
    }
    let mut trials = Vec::new();
    trials.extend(adversarial_suite!(trials URL, redis_store(), callers = 200));
    trials.extend(cancellation_suite!(trials URL, redis_store()));
    trials.extend(durable_suite!(trials URL, in_prefix));
    trials.extend(inspection_suite!(trials URL, redis_store()));
    trials.retain(|trial| !PURGES_BY_COUNT.contains(&trial.name()));
    trials.extend(redis_cases::trials());
    trials.extend(trials!(URL;
        six_processes_refunding_the_same_order_at_once_refund_it_once,
        a_holder_killed_mid_action_is_taken_over_once_after_its_lease,
        after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so,
        a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result,
    ));
    harness::main(trials);
}
