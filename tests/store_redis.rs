//! The Redis store against a real server: the adversarial, cancellation,
//! durable and inspection suites, several OS processes with a `kill -9` of a
//! holder, and what is Redis's own: the key layout, retention by key expiry,
//! the eviction warning, wake-ups published only when someone waits, scripts
//! the server forgot, and `WAIT`. The suite's restart cases run on a
//! `redis-server` of their own (`redis_cases::restart`), killed and started
//! again over its append-only file.
//!
//! The server's address comes from `IDEMPOTENT_REDIS_URL`. Without it every
//! case is reported as ignored ("needs IDEMPOTENT_REDIS_URL"), except in CI,
//! where it fails. Every store gets a key prefix of its own, whose keys are
//! deleted afterwards.

mod coalesced;
mod harness;
mod partition;
mod redis_cases;

use idempotent_tools::RedisStore;
use idempotent_tools::store::redis::redis;
use idempotent_tools_testing::conformance::{Scope, Suite, kit};
use redis_cases::restart::Server;

const URL: &str = "IDEMPOTENT_REDIS_URL";

fn url() -> Option<String> {
    std::env::var(URL).ok()
}

/// A prefix no other run, case or process shares.
fn unique_prefix() -> String {
    format!("idempotent-test:{}:", kit::unique_id())
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

/// The key prefix of a case of the conformance suite, shared by the case's
/// child processes.
fn prefix_of(scope: &Scope) -> String {
    format!("idempotent-conformance:{}:", scope.id())
}

/// The case's store, under a prefix of its own. Records in Redis leave by
/// key expiry, so the suite checks expiry instead of purges.
async fn in_scope(scope: Scope) -> RedisStore {
    let url = url().expect("the suite runs only with the server's URL");
    let store = RedisStore::builder(url)
        .prefix(prefix_of(&scope))
        .connect()
        .await
        .expect("a store");
    if scope.is_child() {
        assert!(store.listening().await, "the child listens for wake-ups");
    }
    store
}

/// Deletes every key the case left under its prefix.
async fn drop_prefix(scope: Scope) {
    let url = url().expect("the suite runs only with the server's URL");
    let mut admin = admin(&url).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", prefix_of(&scope)))
        .query_async(&mut admin)
        .await
        .expect("keys");
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut admin)
            .await
            .expect("del");
    }
}

/// A store on a `redis-server` of the case's own, for the restart cases.
/// It coalesces its steps into pipelines, so that the pipelines' path meets
/// a real restart here; `redis_cases::restart` restarts the store as it is
/// by default.
async fn on_a_server_of_its_own(_scope: Scope) -> (RedisStore, Server) {
    let server = Server::start().expect("`redis-server` on the PATH (Server::can_start said so)");
    let store = RedisStore::builder(server.url())
        .coalesce(true)
        .connect()
        .await
        .expect("a store");
    (store, server)
}

fn main() {
    let mut suite = Suite::new(in_scope)
        .with_records()
        .requiring_env(URL)
        .cleaning_up(drop_prefix)
        .racing_callers(200)
        .retaining_by_expiry()
        .counting_statements(RedisStore::round_trips);
    if Server::can_start() {
        suite = suite.restarting(on_a_server_of_its_own);
    }
    let mut trials = suite.trials();
    trials.extend(redis_cases::trials());
    harness::main_waiting(trials);
}
