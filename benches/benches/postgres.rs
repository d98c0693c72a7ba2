//! The Postgres store: a fresh call (claim, action, completion) and a replay,
//! beside the floors of one plain `INSERT` and one plain `SELECT` by key on
//! the same server; the statements each call sends; and claims per second
//! with several clients, against pgbench's insert-only rate measured in the
//! same run.
//!
//! ```sh
//! cargo bench -p idempotent-benches --features postgres --bench postgres -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! The server is `IDEMPOTENT_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Everything is created in a
//! schema of its own, `idempotent_bench`, dropped at the end; pgbench's
//! table is created and dropped by `benches/pgbench/run.sh`.
//! `THROUGHPUT_SECONDS` (default 5) sets how long each throughput point runs;
//! 0 skips the throughput table.

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use idempotent_benches::{
    Network, Provider, TOOL, bench_run, multi_thread, refund_key, refund_tool,
};
use idempotent_tools::{
    ClaimAnswer, ClaimRequest, DEFAULT_LEASE, DEFAULT_RETENTION, Fingerprint, Key, PostgresStore,
    Run, Store, ToolId,
};
use tokio::runtime::Runtime;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA: &str = "idempotent_bench";
const CLIENTS: [u64; 3] = [1, 4, 16];

/// The plain floor's table: as wide as a claim row, with the same indexes.
const PLAIN_TABLE: &str = "
    CREATE TABLE plain_inserts (
        key_digest  bytea       NOT NULL PRIMARY KEY,
        key_text    text        NOT NULL,
        tool        text        NOT NULL,
        fingerprint bytea       NOT NULL,
        state       text        NOT NULL,
        owner       bytea       NOT NULL,
        fence       bigint      NOT NULL,
        taken_over  boolean     NOT NULL DEFAULT false,
        lease_until timestamptz,
        ending      text,
        result      text,
        finished_at timestamptz,
        expires_at  timestamptz NOT NULL
    );
    CREATE INDEX plain_inserts_expires_at ON plain_inserts (expires_at);";

const PLAIN_INSERT: &str = "
    INSERT INTO plain_inserts
        (key_digest, key_text, tool, fingerprint, state, owner, fence, lease_until, expires_at)
    VALUES ($1, $2, 'benches::refund', $3, 'held', $3, 1,
            now() + interval '30 seconds', now() + interval '7 days 30 seconds')";

const PLAIN_SELECT: &str = "
    SELECT key_text, tool, fingerprint, state FROM plain_inserts WHERE key_digest = $1";

/// Order ids never repeat within a process, so every fresh call is new.
static NEXT_ORDER: AtomicU64 = AtomicU64::new(10_000_000);

fn next_order() -> u64 {
    NEXT_ORDER.fetch_add(1, Ordering::Relaxed)
}

fn base_url() -> String {
    std::env::var("IDEMPOTENT_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// The URL with the benchmark's schema first on the search path, so the
/// store's `migrate` creates its table there.
fn bench_url(base: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{SCHEMA}")
}

async fn admin(base: &str, sql: &str) -> Result<(), idempotent_tools::StoreError> {
    let store = PostgresStore::connect(base).await?;
    let client = store
        .pool()
        .get()
        .await
        .map_err(|e| idempotent_tools::StoreError::Unavailable(Box::new(e)))?;
    client
        .batch_execute(sql)
        .await
        .map_err(|e| idempotent_tools::StoreError::Backend(Box::new(e)))
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

async fn plain_insert(store: &PostgresStore, key: &Key) {
    let client = store.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
    let stmt = client
        .prepare_cached(PLAIN_INSERT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let digest = key.digest();
    client
        .execute(
            &stmt,
            &[&digest.as_slice(), &key.as_str(), &[0u8; 16].as_slice()],
        )
        .await
        .unwrap_or_else(|e| panic!("the plain insert failed: {e}"));
}

async fn plain_select(store: &PostgresStore, key: &Key) -> bool {
    let client = store.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
    let stmt = client
        .prepare_cached(PLAIN_SELECT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let digest = key.digest();
    client
        .query_opt(&stmt, &[&digest.as_slice()])
        .await
        .unwrap_or_else(|e| panic!("the plain select failed: {e}"))
        .is_some()
}

fn statements_per_call(rt: &Runtime, store: &Arc<PostgresStore>, provider: &Provider, run: &Run) {
    let order_id = next_order();
    let before = store.statements();
    let fresh = rt.block_on(refund_tool(store, provider, run, order_id, 42));
    assert!(fresh.is_ok_and(|o| o.is_fresh()));
    let after_fresh = store.statements();
    let replay = rt.block_on(refund_tool(store, provider, run, order_id, 42));
    assert!(replay.is_ok_and(|o| o.is_replay()));
    let after_replay = store.statements();
    println!(
        "postgres statements per call: fresh {}, replay {} (one round trip each; \
         prepared once per pooled connection)",
        after_fresh - before,
        after_replay - after_fresh
    );
}

fn latency(c: &mut Criterion, rt: &Runtime, store: &Arc<PostgresStore>) {
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    statements_per_call(rt, store, &provider, &run);

    let mut group = c.benchmark_group("postgres");
    group.bench_function("fresh_call", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let outcome = refund_tool(store, &provider, &run, next_order(), 42).await;
                assert!(outcome.is_ok_and(|o| o.is_fresh()));
            })
        })
    });
    group.bench_function("plain_insert", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let key = refund_key(&run, next_order()).unwrap_or_else(|e| panic!("{e}"));
                plain_insert(store, &key).await;
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
    let key = refund_key(&run, order_id).unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(plain_insert(store, &key));
    group.bench_function("plain_select", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                assert!(plain_select(store, black_box(&key)).await);
            })
        })
    });
    group.finish();
}

#[derive(Clone, Copy)]
enum Work {
    /// `Store::claim` alone: one insert, like pgbench's.
    Claim,
    /// A whole guarded call: claim, action, completion.
    FreshCall,
    /// `Store::claim`, then the completion's `UPDATE` by hand without its
    /// `pg_notify`: what a fresh call would cost if completions did not
    /// notify.
    ClaimThenSilentUpdate,
}

/// The store's completion without the notification that wakes waiters.
const SILENT_COMPLETE: &str = "
    UPDATE idempotent_claims
    SET state = 'done', ending = 'ok', result = '{\"id\":1,\"order_id\":1,\"usd\":42}',
        finished_at = now(), lease_until = NULL, expires_at = now() + interval '7 days'
    WHERE key_digest = $1 AND state = 'held'";

async fn silent_complete(store: &PostgresStore, key: &Key) {
    let client = store.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
    let stmt = client
        .prepare_cached(SILENT_COMPLETE)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let digest = key.digest();
    let updated = client
        .execute(&stmt, &[&digest.as_slice()])
        .await
        .unwrap_or_else(|e| panic!("the update failed: {e}"));
    assert_eq!(updated, 1);
}

/// Operations per second with `clients` tasks each working for `for_how_long`.
fn rate(
    rt: &Runtime,
    store: &Arc<PostgresStore>,
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
                            Work::Claim | Work::ClaimThenSilentUpdate => {
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
                                if matches!(work, Work::ClaimThenSilentUpdate) {
                                    silent_complete(&store, &key).await;
                                }
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

/// pgbench's inserts per second for each client count, from
/// `benches/pgbench/run.sh`; `None` if pgbench could not run.
fn pgbench(seconds: u64) -> Option<Vec<(u64, f64)>> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench/run.sh");
    let clients = CLIENTS.map(|c| c.to_string()).join(" ");
    let output = Command::new("bash")
        .arg(script)
        .env("CLIENTS", clients)
        .env("SECONDS_EACH", seconds.to_string())
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!(
            "pgbench failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    let rows = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let cells: Vec<_> = line.split('|').map(str::trim).collect();
            Some((cells.get(1)?.parse().ok()?, cells.get(2)?.parse().ok()?))
        })
        .collect();
    Some(rows)
}

fn throughput(rt: &Runtime, store: &Arc<PostgresStore>, unflushed: &Arc<PostgresStore>) {
    let seconds = std::env::var("THROUGHPUT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u64);
    if seconds == 0 {
        return;
    }
    let for_how_long = Duration::from_secs(seconds);
    let pgbench = pgbench(seconds).unwrap_or_default();
    println!();
    println!("Postgres throughput, {seconds} s per point, pgbench measured just before:");
    println!();
    println!(
        "| clients | pgbench inserts/s | claims/s | ÷ pgbench | fresh calls/s | ÷ pgbench \
         | claim + UPDATE without NOTIFY /s | ÷ pgbench \
         | fresh calls/s, asynchronous completions | ÷ pgbench |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for clients in CLIENTS {
        let claims = rate(rt, store, clients, Work::Claim, for_how_long);
        let calls = rate(rt, store, clients, Work::FreshCall, for_how_long);
        let silent = rate(
            rt,
            store,
            clients,
            Work::ClaimThenSilentUpdate,
            for_how_long,
        );
        let unflushed = rate(rt, unflushed, clients, Work::FreshCall, for_how_long);
        let inserts = pgbench
            .iter()
            .find(|(c, _)| *c == clients)
            .map(|(_, tps)| *tps);
        let ratio = |x: f64| inserts.map_or("n/a".to_owned(), |i| format!("{:.2}", x / i));
        println!(
            "| {clients} | {} | {claims:.0} | {} | {calls:.0} | {} | {silent:.0} | {} \
             | {unflushed:.0} | {} |",
            inserts.map_or("n/a".to_owned(), |i| format!("{i:.0}")),
            ratio(claims),
            ratio(calls),
            ratio(silent),
            ratio(unflushed),
        );
    }
    println!();
}

fn main() {
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let rt = multi_thread();
    let base = base_url();
    let setup = format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA};");
    if let Err(e) = rt.block_on(admin(&base, &setup)) {
        println!("postgres benchmarks skipped: no server at {base}: {e}");
        return;
    }
    let store = rt.block_on(async {
        let store = PostgresStore::connect(&bench_url(&base)).await?;
        store.migrate().await?;
        let client = store
            .pool()
            .get()
            .await
            .map_err(|e| idempotent_tools::StoreError::Unavailable(Box::new(e)))?;
        client
            .batch_execute(PLAIN_TABLE)
            .await
            .map_err(|e| idempotent_tools::StoreError::Backend(Box::new(e)))?;
        Ok::<_, idempotent_tools::StoreError>(Arc::new(store))
    });
    let store = store.unwrap_or_else(|e| panic!("cannot set the benchmark schema up: {e}"));

    // The same schema, with completions committed without a flush.
    let unflushed = rt
        .block_on(
            PostgresStore::builder(&bench_url(&base))
                .asynchronous_completions(true)
                .connect(),
        )
        .unwrap_or_else(|e| panic!("cannot connect: {e}"));
    let unflushed = Arc::new(unflushed);

    latency(&mut c, &rt, &store);
    throughput(&rt, &store, &unflushed);
    c.final_summary();

    drop(store);
    drop(unflushed);
    if let Err(e) = rt.block_on(admin(
        &base,
        &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"),
    )) {
        eprintln!("could not drop the schema {SCHEMA}: {e}");
    }
}
