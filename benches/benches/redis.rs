//! The Redis store: a fresh call (claim, action, completion) and a replay,
//! beside the floors of one plain `SET NX PX` and one plain `GET` on the same
//! server; the round trips each step makes; claims and fresh calls per
//! second with several clients, against `redis-benchmark -t set` measured in
//! the same run, not coalesced (the default) and coalesced; and what `WAIT 0` adds to
//! a fresh call. The throughput rows are kept in `benches/results/`.
//!
//! ```sh
//! cargo bench -p idempotent-benches --features redis --bench redis -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! The server is `IDEMPOTENT_REDIS_URL` (default `redis://127.0.0.1:6379`).
//! Every key is under the prefix `idempotent-bench:`, deleted at the end.
//! `THROUGHPUT_SECONDS` (default 5) sets how long each throughput point
//! runs; 0 skips the throughput table; `THROUGHPUT_CLIENTS` (as in `"16"`)
//! which client counts it measures. Beside it, a table of CPU time per
//! operation: redis-benchmark's own and the server's for a `SET`, the bench
//! process's and the server's for a claim and a fresh call (`src/cpu.rs`).

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use idempotent_benches::durable::{
    self, Client, ClientWork, backend, fresh_call, next_order, replay, timed, unavailable,
};
use idempotent_benches::{Network, Provider, bench_run, cpu, multi_thread, results};
use idempotent_tools::RedisStore;
use idempotent_tools::store::redis::RedisStoreBuilder;
use idempotent_tools::store::redis::redis;
use tokio::runtime::Runtime;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
const PREFIX: &str = "idempotent-bench:";
const CLIENTS: [u64; 3] = [1, 4, 16];
/// The server's process, whose CPU the throughput table counts.
const SERVER: &str = "redis-server";

fn url() -> String {
    durable::server_url("IDEMPOTENT_REDIS_URL", DEFAULT_URL)
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
    let (fresh, replayed) =
        durable::steps_per_call(rt, store, &provider, &run, |store| store.round_trips());
    println!("redis round trips per call: fresh {fresh} (claim, completion), replay {replayed}");

    let mut group = c.benchmark_group("redis");
    group.bench_function("fresh_call", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                fresh_call(store, &provider, &run, next_order()).await;
            })
        })
    });
    group.bench_function("fresh_call_wait_0", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                fresh_call(waiting, &provider, &run, next_order()).await;
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
    rt.block_on(fresh_call(store, &provider, &run, order_id));
    group.bench_function("replay", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                replay(store, &provider, &run, black_box(order_id)).await;
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

impl ClientWork<RedisStore> for Work {
    async fn once(self, client: &Client<RedisStore>, order_id: u64) {
        match self {
            Work::Claim => {
                client.claim(order_id).await;
            }
            Work::FreshCall => client.fresh_call(order_id).await,
        }
    }
}

/// `redis-benchmark -t set` with `clients` connections: `SET`s per second,
/// with the CPU per `SET` of redis-benchmark (this process's child) and of
/// the server; `None` if it could not run.
fn redis_benchmark(clients: u64, seconds: u64) -> Option<(f64, cpu::PerOp)> {
    let info = redis::parse_redis_url(&url())?;
    let host = info.host_str()?.to_owned();
    let port = info.port().unwrap_or(6379).to_string();
    // About `seconds` of work at the rate a local server sustains.
    let requests = 25_000 * seconds * clients.min(4);
    let before = cpu::sample(SERVER);
    let output = Command::new("redis-benchmark")
        .args([
            "-h",
            &host,
            "-p",
            &port,
            "-t",
            "set",
            "-n",
            &requests.to_string(),
            "--csv",
        ])
        .args(["-c", &clients.to_string()])
        .output()
        .ok()?;
    let after = cpu::sample(SERVER);
    if !output.status.success() {
        return None;
    }
    let sets = String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|line| line.starts_with("\"SET\""))
        .and_then(|line| line.split(',').nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())?;
    Some((sets, cpu::PerOp::between(before, after, requests as f64)))
}

fn throughput(rt: &Runtime, store: &Arc<RedisStore>, coalesced: &Arc<RedisStore>) {
    let Some(seconds) = durable::throughput_seconds() else {
        return;
    };
    let for_how_long = Duration::from_secs(seconds);
    let mut cpu_rows = Vec::new();
    println!();
    println!(
        "Redis throughput, {seconds} s per point, redis-benchmark -t set measured just before:"
    );
    println!();
    println!(
        "| clients | redis-benchmark SET/s | claims/s | ÷ SET | fresh calls/s | ÷ SET \
         | coalesced fresh calls/s | ÷ SET |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for clients in durable::throughput_clients(&CLIENTS) {
        let benchmark = redis_benchmark(clients, seconds);
        let sets = benchmark.map(|(sets, _)| sets);
        let claims = durable::measure(rt, store, clients, Work::Claim, for_how_long, SERVER);
        let calls = durable::measure(rt, store, clients, Work::FreshCall, for_how_long, SERVER);
        let together = durable::rate(rt, coalesced, clients, Work::FreshCall, for_how_long);
        if let Some(sets) = sets {
            results::throughput("redis", "redis-benchmark set", clients, sets);
        }
        results::throughput("redis", "claim", clients, claims.per_second);
        results::throughput("redis", "fresh call", clients, calls.per_second);
        let ratio = |x: f64| sets.map_or("n/a".to_owned(), |s| format!("{:.2}", x / s));
        println!(
            "| {clients} | {} | {:.0} | {} | {:.0} | {} | {together:.0} | {} |",
            sets.map_or("n/a".to_owned(), |s| format!("{s:.0}")),
            claims.per_second,
            ratio(claims.per_second),
            calls.per_second,
            ratio(calls.per_second),
            ratio(together),
        );
        cpu_rows.push((
            clients,
            benchmark.map(|(_, cpu)| cpu),
            claims.cpu,
            calls.cpu,
        ));
    }
    println!();
    println!("CPU per operation, µs (this machine's cores are shared by all three):");
    println!();
    println!(
        "| clients | SET: redis-benchmark | SET: server | claim: bench | claim: server \
         | fresh call: bench | fresh call: server |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (clients, benchmark, claims, calls) in cpu_rows {
        let [peer, peer_server] = cpu::peer_cells(benchmark);
        println!(
            "| {clients} | {peer} | {peer_server} | {:.1} | {:.1} | {:.1} | {:.1} |",
            claims.own, claims.server, calls.own, calls.server
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

/// The default store's builder, with `REDIS_CONNECTIONS` multiplexed
/// connections if set (the store's default otherwise).
fn builder(url: &str) -> RedisStoreBuilder {
    let builder = RedisStore::builder(url).prefix(PREFIX);
    match std::env::var("REDIS_CONNECTIONS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        Some(connections) => builder.connections(connections),
        None => builder,
    }
}

fn main() {
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let rt = multi_thread();
    let url = url();
    let connected = rt.block_on(async {
        let store = builder(&url).connect().await?;
        let waiting = RedisStore::builder(url.as_str())
            .prefix(PREFIX)
            .wait_for_replicas(0, Duration::from_millis(100))
            .connect()
            .await?;
        let coalesced = RedisStore::builder(url.as_str())
            .prefix(PREFIX)
            .coalesce(true)
            .connect()
            .await?;
        let plain = redis::Client::open(url.as_str())
            .map_err(backend)?
            .get_multiplexed_async_connection()
            .await
            .map_err(unavailable)?;
        Ok::<_, idempotent_tools::store::StoreError>((
            Arc::new(store),
            Arc::new(waiting),
            Arc::new(coalesced),
            plain,
        ))
    });
    let (store, waiting, coalesced, mut plain) = match connected {
        Ok(connected) => connected,
        Err(e) => {
            println!("redis benchmarks skipped: no server at {url}: {e}");
            return;
        }
    };

    latency(&mut c, &rt, &store, &waiting, &plain);
    throughput(&rt, &store, &coalesced);
    c.final_summary();

    if let Err(e) = rt.block_on(clean(&mut plain)) {
        eprintln!("could not delete the keys under {PREFIX}: {e}");
    }
}
