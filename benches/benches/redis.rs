//! The Redis store: a fresh call (claim, action, completion) and a replay,
//! beside the floors of one plain `SET NX PX` and one plain `GET` on the same
//! server; the round trips each step makes; claims and fresh calls per
//! second with several clients, against `redis-benchmark -t set` measured in
//! the same run; and what `WAIT 0` adds to a fresh call.
//!
//! ```sh
//! cargo bench -p idempotent-benches --features redis --bench redis -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! The server is `IDEMPOTENT_REDIS_URL` (default `redis://127.0.0.1:6379`).
//! Every key is under the prefix `idempotent-bench:`, deleted at the end.
//! `THROUGHPUT_SECONDS` (default 5) sets how long each throughput point
//! runs; 0 skips the throughput table.

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use idempotent_benches::{
    Network, Provider, TOOL, bench_run, multi_thread, refund_key, refund_tool,
};
use idempotent_tools::store::redis::redis;
use idempotent_tools::{
    ClaimAnswer, ClaimRequest, DEFAULT_LEASE, DEFAULT_RETENTION, Fingerprint, RedisStore, Run,
    Store, ToolId,
};
use tokio::runtime::Runtime;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
const PREFIX: &str = "idempotent-bench:";
const CLIENTS: [u64; 3] = [1, 4, 16];

/// Order ids never repeat within a process, so every fresh call is new.
static NEXT_ORDER: AtomicU64 = AtomicU64::new(10_000_000);

fn next_order() -> u64 {
    NEXT_ORDER.fetch_add(1, Ordering::Relaxed)
}

fn url() -> String {
    std::env::var("IDEMPOTENT_REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Times `iters` sequential calls of `call`.
fn timed(rt: &Runtime, iters: u64, mut call: impl AsyncFnMut()) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            call().await;
        }
        start.elapsed()
    })
}

fn round_trips_per_step(rt: &Runtime, store: &Arc<RedisStore>, provider: &Provider, run: &Run) {
    let order_id = next_order();
    let before = store.round_trips();
    let fresh = rt.block_on(refund_tool(store, provider, run, order_id, 42));
    assert!(fresh.is_ok_and(|o| o.is_fresh()));
    let after_fresh = store.round_trips();
    let replay = rt.block_on(refund_tool(store, provider, run, order_id, 42));
    assert!(replay.is_ok_and(|o| o.is_replay()));
    let after_replay = store.round_trips();
    println!(
        "redis round trips per call: fresh {} (claim, completion), replay {}",
        after_fresh - before,
        after_replay - after_fresh
    );
}

fn latency(
    c: &mut Criterion,
    rt: &Runtime,
    store: &Arc<RedisStore>,
    waiting: &Arc<RedisStore>,
    plain: &redis::aio::MultiplexedConnection,
) {
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    round_trips_per_step(rt, store, &provider, &run);

    let mut group = c.benchmark_group("redis");
    group.bench_function("fresh_call", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let outcome = refund_tool(store, &provider, &run, next_order(), 42).await;
                assert!(outcome.is_ok_and(|o| o.is_fresh()));
            })
        })
    });
    group.bench_function("fresh_call_wait_0", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let outcome = refund_tool(waiting, &provider, &run, next_order(), 42).await;
                assert!(outcome.is_ok_and(|o| o.is_fresh()));
            })
        })
    });
    group.bench_function("plain_set_nx_px", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let key = format!("{PREFIX}plain:{}", next_order());
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg("held")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut plain.clone())
                    .await
                    .unwrap_or_else(|e| panic!("the plain SET failed: {e}"));
                assert!(set.is_some());
            })
        })
    });
    let order_id = next_order();
    let first = rt.block_on(refund_tool(store, &provider, &run, order_id, 42));
    assert!(first.is_ok_and(|o| o.is_fresh()));
    group.bench_function("replay", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let outcome = refund_tool(store, &provider, &run, black_box(order_id), 42).await;
                assert!(outcome.is_ok_and(|o| o.is_replay()));
            })
        })
    });
    let key = format!("{PREFIX}plain:get");
    rt.block_on(async {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("done")
            .query_async(&mut plain.clone())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    group.bench_function("plain_get", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let got: Option<String> = redis::cmd("GET")
                    .arg(black_box(&key))
                    .query_async(&mut plain.clone())
                    .await
                    .unwrap_or_else(|e| panic!("the plain GET failed: {e}"));
                assert!(got.is_some());
            })
        })
    });
    group.finish();
}

#[derive(Clone, Copy)]
enum Work {
    /// `Store::claim` alone: one script, like one `SET`.
    Claim,
    /// A whole guarded call: claim, action, completion.
    FreshCall,
}

/// Operations per second with `clients` tasks each working for `for_how_long`.
fn rate(
    rt: &Runtime,
    store: &Arc<RedisStore>,
    clients: u64,
    work: Work,
    for_how_long: Duration,
) -> f64 {
    let run = Arc::new(bench_run());
    let provider = Arc::new(Provider::new(Network::Instant));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + for_how_long;
    rt.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let (store, run, provider, done) = (
                    Arc::clone(store),
                    Arc::clone(&run),
                    Arc::clone(&provider),
                    Arc::clone(&done),
                );
                tokio::spawn(async move {
                    let tool = ToolId::new(TOOL);
                    while Instant::now() < deadline {
                        let order_id = next_order();
                        match work {
                            Work::Claim => {
                                let key =
                                    refund_key(&run, order_id).unwrap_or_else(|e| panic!("{e}"));
                                let request = ClaimRequest {
                                    key: &key,
                                    tool: &tool,
                                    fingerprint: Fingerprint::EMPTY,
                                    lease: DEFAULT_LEASE,
                                    retention: DEFAULT_RETENTION,
                                };
                                let state = store.claim(request).await;
                                assert!(matches!(state, Ok(ClaimAnswer::Claimed(_))), "{state:?}");
                            }
                            Work::FreshCall => {
                                let outcome =
                                    refund_tool(&store, &provider, &run, order_id, 42).await;
                                assert!(outcome.is_ok_and(|o| o.is_fresh()));
                            }
                        }
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
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// `redis-benchmark -t set` with `clients` connections: `SET`s per second,
/// or `None` if it could not run.
fn redis_benchmark(clients: u64, seconds: u64) -> Option<f64> {
    let info = redis::parse_redis_url(&url())?;
    let host = info.host_str()?.to_owned();
    let port = info.port().unwrap_or(6379).to_string();
    // About `seconds` of work at the rate a local server sustains.
    let requests = (25_000 * seconds * clients.min(4)).to_string();
    let output = Command::new("redis-benchmark")
        .args([
            "-h", &host, "-p", &port, "-t", "set", "-n", &requests, "--csv",
        ])
        .args(["-c", &clients.to_string()])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|line| line.starts_with("\"SET\""))
        .and_then(|line| line.split(',').nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())
}

fn throughput(rt: &Runtime, store: &Arc<RedisStore>) {
    let seconds = std::env::var("THROUGHPUT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u64);
    if seconds == 0 {
        return;
    }
    let for_how_long = Duration::from_secs(seconds);
    println!();
    println!(
        "Redis throughput, {seconds} s per point, redis-benchmark -t set measured just before:"
    );
    println!();
    println!("| clients | redis-benchmark SET/s | claims/s | ÷ SET | fresh calls/s | ÷ SET |");
    println!("|---|---|---|---|---|---|");
    for clients in CLIENTS {
        let sets = redis_benchmark(clients, seconds);
        let claims = rate(rt, store, clients, Work::Claim, for_how_long);
        let calls = rate(rt, store, clients, Work::FreshCall, for_how_long);
        let ratio = |x: f64| sets.map_or("n/a".to_owned(), |s| format!("{:.2}", x / s));
        println!(
            "| {clients} | {} | {claims:.0} | {} | {calls:.0} | {} |",
            sets.map_or("n/a".to_owned(), |s| format!("{s:.0}")),
            ratio(claims),
            ratio(calls),
        );
    }
    println!();
}

/// Deletes every key under [`PREFIX`].
async fn clean(plain: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<()> {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{PREFIX}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(plain)
            .await?;
        if !keys.is_empty() {
            let _: i64 = redis::cmd("UNLINK").arg(keys).query_async(plain).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

fn main() {
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let rt = multi_thread();
    let url = url();
    let connected = rt.block_on(async {
        let store = RedisStore::builder(url.as_str())
            .prefix(PREFIX)
            .connect()
            .await?;
        let waiting = RedisStore::builder(url.as_str())
            .prefix(PREFIX)
            .wait_for_replicas(0, Duration::from_millis(100))
            .connect()
            .await?;
        let plain = redis::Client::open(url.as_str())
            .map_err(|e| idempotent_tools::StoreError::Backend(Box::new(e)))?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| idempotent_tools::StoreError::Unavailable(Box::new(e)))?;
        Ok::<_, idempotent_tools::StoreError>((Arc::new(store), Arc::new(waiting), plain))
    });
    let (store, waiting, mut plain) = match connected {
        Ok(connected) => connected,
        Err(e) => {
            println!("redis benchmarks skipped: no server at {url}: {e}");
            return;
        }
    };

    latency(&mut c, &rt, &store, &waiting, &plain);
    throughput(&rt, &store);
    c.final_summary();

    if let Err(e) = rt.block_on(clean(&mut plain)) {
        eprintln!("could not delete the keys under {PREFIX}: {e}");
    }
}
