//! What the durable stores' benchmarks (SQLite, Postgres, Redis) share:
//! fresh order ids, the server a benchmark reaches, timed sequential calls,
//! the fresh call and the replay they time, the steps one call sends, and
//! operations per second with several clients at once.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idempotent_tools::{
    Run,
    call::{DEFAULT_LEASE, DEFAULT_RETENTION, Fingerprint, Key, ToolId},
    store::{ClaimAnswer, ClaimRequest, Store, StoreError},
};
use tokio::runtime::Runtime;

use crate::{Network, Provider, TOOL, bench_run, cpu, refund_key, refund_tool};

/// Order ids never repeat within a process, so every fresh call is new.
static NEXT_ORDER: AtomicU64 = AtomicU64::new(10_000_000);

/// An order id no call in this process used before.
pub fn next_order() -> u64 {
    NEXT_ORDER.fetch_add(1, Ordering::Relaxed)
}

/// The server's URL: the environment variable `var`, or `default`.
pub fn server_url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// How long each throughput point runs: `THROUGHPUT_SECONDS`, 5 by
/// default; `None` for 0, which skips the throughput table.
pub fn throughput_seconds() -> Option<u64> {
    let seconds = std::env::var("THROUGHPUT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u64);
    (seconds != 0).then_some(seconds)
}

/// The client counts a throughput table measures: `THROUGHPUT_CLIENTS`
/// (numbers separated by spaces or commas, as in `"16 64"`), or every
/// count in `all` when it is not set.
pub fn throughput_clients(all: &[u64]) -> Vec<u64> {
    let Ok(chosen) = std::env::var("THROUGHPUT_CLIENTS") else {
        return all.to_vec();
    };
    let chosen: Vec<u64> = chosen
        .split([' ', ','])
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    if chosen.is_empty() {
        all.to_vec()
    } else {
        chosen
    }
}

/// A store error for a failure of the server or of the benchmark's own
/// statements.
pub fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Box::new(e))
}

/// A store error for a server that cannot be reached.
pub fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

/// Times `iters` sequential calls of `call`.
pub fn timed(rt: &Runtime, iters: u64, mut call: impl AsyncFnMut()) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            call().await;
        }
        start.elapsed()
    })
}

/// One guarded refund of an order never refunded: it must run.
pub async fn fresh_call<S: Store>(store: &Arc<S>, provider: &Provider, run: &Run, order_id: u64) {
    let outcome = refund_tool(store, provider, run, order_id, 42).await;
    assert!(outcome.is_ok_and(|o| o.is_fresh()));
}

/// One guarded refund of an order refunded before: it must replay.
pub async fn replay<S: Store>(store: &Arc<S>, provider: &Provider, run: &Run, order_id: u64) {
    let outcome = refund_tool(store, provider, run, order_id, 42).await;
    assert!(outcome.is_ok_and(|o| o.is_replay()));
}

/// What one fresh call and one replay of it cost, as `count` counts the
/// store's steps (statements, round trips).
pub fn steps_per_call<S: Store>(
    rt: &Runtime,
    store: &Arc<S>,
    provider: &Provider,
    run: &Run,
    count: impl Fn(&S) -> u64,
) -> (u64, u64) {
    let order_id = next_order();
    let before = count(store);
    rt.block_on(fresh_call(store, provider, run, order_id));
    let after_fresh = count(store);
    rt.block_on(replay(store, provider, run, order_id));
    let after_replay = count(store);
    (after_fresh - before, after_replay - after_fresh)
}

/// One of the clients [`rate`] runs at once.
pub struct Client<S> {
    /// The store it calls.
    pub store: Arc<S>,
    /// The run its keys are under.
    pub run: Arc<Run>,
    /// The provider its refunds reach.
    pub provider: Arc<Provider>,
    /// The tool its bare claims are for.
    pub tool: ToolId,
}

impl<S: Store> Client<S> {
    /// `Store::claim` alone on the order's key, which must be new; returns
    /// the key.
    pub async fn claim(&self, order_id: u64) -> Key {
        let key = refund_key(&self.run, order_id).unwrap_or_else(|e| panic!("{e}"));
        let request = ClaimRequest {
            key: &key,
            tool: &self.tool,
            fingerprint: Fingerprint::EMPTY,
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
        };
        let state = self.store.claim(request).await;
        assert!(matches!(state, Ok(ClaimAnswer::Claimed(_))), "{state:?}");
        key
    }

    /// A whole guarded call: claim, action, completion.
    pub async fn fresh_call(&self, order_id: u64) {
        fresh_call(&self.store, &self.provider, &self.run, order_id).await;
    }
}

/// What each client of [`rate`] does with one new order.
pub trait ClientWork<S>: Copy + Send + 'static {
    /// Does the work once for `order_id`.
    fn once(self, client: &Client<S>, order_id: u64) -> impl Future<Output = ()> + Send;
}

/// Operations per second with `clients` tasks each doing `work` for
/// `for_how_long`.
pub fn rate<S: Store, W: ClientWork<S>>(
    rt: &Runtime,
    store: &Arc<S>,
    clients: u64,
    work: W,
    for_how_long: Duration,
) -> f64 {
    measure(rt, store, clients, work, for_how_long, "").per_second
}

/// A throughput point: operations per second, and the CPU each took on
/// this process and on the server.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Operations done.
    pub ops: f64,
    /// Operations per second.
    pub per_second: f64,
    /// Microseconds of CPU per operation.
    pub cpu: cpu::PerOp,
}

/// [`rate`], with the CPU per operation of this process and of the
/// processes named `server` (see [`cpu::sample`]).
pub fn measure<S: Store, W: ClientWork<S>>(
    rt: &Runtime,
    store: &Arc<S>,
    clients: u64,
    work: W,
    for_how_long: Duration,
    server: &str,
) -> Point {
    let before = cpu::sample(server);
    let run = Arc::new(bench_run());
    let provider = Arc::new(Provider::new(Network::Instant));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + for_how_long;
    rt.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let client = Client {
                    store: Arc::clone(store),
                    run: Arc::clone(&run),
                    provider: Arc::clone(&provider),
                    tool: ToolId::new(TOOL),
                };
                let done = Arc::clone(&done);
                tokio::spawn(async move {
                    while Instant::now() < deadline {
                        work.once(&client, next_order()).await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await
                .unwrap_or_else(|e| panic!("a client failed: {e}"));
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let after = cpu::sample(server);
    let ops = done.load(Ordering::Relaxed) as f64;
    Point {
        ops,
        per_second: ops / elapsed,
        cpu: cpu::PerOp::between(before, after, ops),
    }
}
