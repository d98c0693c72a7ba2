//! The Postgres store: a fresh call (claim, action, completion) and a replay,
//! beside the floors of one plain `INSERT` and one plain `SELECT` by key on
//! the same server; the statements each call sends; and claims and fresh
//! calls per second with 1 to 64 clients, coalesced (the default) and not,
//! against pgbench's insert-only rate measured in the same run. The
//! throughput points are kept in `benches/results/throughput.csv`.
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
//! 0 skips the throughput table. `COALESCE_IN_FLIGHT` sets the coalescing
//! stores' `coalesce_in_flight` (default: a quarter of the pool's size).

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use idempotent_benches::durable::{
    self, Client, ClientWork, backend, fresh_call, next_order, replay, timed, unavailable,
};
use idempotent_benches::{Network, Provider, bench_run, multi_thread, refund_key, results};
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::{PostgresStore, call::Key, store::StoreError};
use tokio::runtime::Runtime;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA: &str = "idempotent_bench";
const CLIENTS: [u64; 4] = [1, 4, 16, 64];

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
        completed_at timestamptz,
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

fn base_url() -> String {
    durable::server_url("IDEMPOTENT_POSTGRES_URL", DEFAULT_URL)
}

/// The URL with the benchmark's schema first on the search path, so the
/// store's `migrate` creates its table there.
fn bench_url(base: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{SCHEMA}")
}

/// Runs `sql` on one of the store's pooled connections.
async fn execute(store: &PostgresStore, sql: &str) -> Result<(), StoreError> {
    let client = store.pool().get().await.map_err(unavailable)?;
    client.batch_execute(sql).await.map_err(backend)
}

async fn admin(base: &str, sql: &str) -> Result<(), StoreError> {
    let store = PostgresStore::connect(base).await?;
    execute(&store, sql).await
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

fn latency(c: &mut Criterion, rt: &Runtime, store: &Arc<PostgresStore>) {
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let (fresh, replayed) =
        durable::steps_per_call(rt, store, &provider, &run, PostgresStore::statements);
    println!(
        "postgres statements per call: fresh {fresh}, replay {replayed} (one round trip each; \
         prepared once per pooled connection)"
    );

    let mut group = c.benchmark_group("postgres");
    group.bench_function("fresh_call", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                fresh_call(store, &provider, &run, next_order()).await;
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
    rt.block_on(fresh_call(store, &provider, &run, order_id));
    group.bench_function("replay", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                replay(store, &provider, &run, black_box(order_id)).await;
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
}

impl ClientWork<PostgresStore> for Work {
    async fn once(self, client: &Client<PostgresStore>, order_id: u64) {
        match self {
            Work::Claim => {
                client.claim(order_id).await;
            }
            Work::FreshCall => client.fresh_call(order_id).await,
        }
    }
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

/// The stores the throughput table compares: coalescing (the default), every
/// step alone, and coalescing with asynchronous completions.
struct Stores {
    coalesced: Arc<PostgresStore>,
    alone: Arc<PostgresStore>,
    unflushed: Arc<PostgresStore>,
}

fn throughput(rt: &Runtime, stores: &Stores) {
    let Some(seconds) = durable::throughput_seconds() else {
        return;
    };
    let for_how_long = Duration::from_secs(seconds);
    let pgbench = pgbench(seconds).unwrap_or_default();
    println!();
    println!("Postgres throughput, {seconds} s per point, pgbench measured just before:");
    println!();
    println!(
        "| clients | pgbench inserts/s | claims/s | ÷ pgbench | fresh calls/s | ÷ pgbench \
         | claims/s, not coalesced | ÷ pgbench | fresh calls/s, not coalesced | ÷ pgbench \
         | fresh calls/s, asynchronous completions | ÷ pgbench |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for clients in CLIENTS {
        let inserts = pgbench
            .iter()
            .find(|(c, _)| *c == clients)
            .map(|(_, tps)| *tps);
        let claims = durable::rate(rt, &stores.coalesced, clients, Work::Claim, for_how_long);
        let calls = durable::rate(
            rt,
            &stores.coalesced,
            clients,
            Work::FreshCall,
            for_how_long,
        );
        let claims_alone = durable::rate(rt, &stores.alone, clients, Work::Claim, for_how_long);
        let calls_alone = durable::rate(rt, &stores.alone, clients, Work::FreshCall, for_how_long);
        let unflushed = durable::rate(
            rt,
            &stores.unflushed,
            clients,
            Work::FreshCall,
            for_how_long,
        );
        if let Some(inserts) = inserts {
            results::throughput("postgres", "pgbench insert", clients, inserts);
        }
        results::throughput("postgres", "claim", clients, claims);
        results::throughput("postgres", "fresh call", clients, calls);
        let ratio = |x: f64| inserts.map_or("n/a".to_owned(), |i| format!("{:.2}", x / i));
        println!(
            "| {clients} | {} | {claims:.0} | {} | {calls:.0} | {} | {claims_alone:.0} | {} \
             | {calls_alone:.0} | {} | {unflushed:.0} | {} |",
            inserts.map_or("n/a".to_owned(), |i| format!("{i:.0}")),
            ratio(claims),
            ratio(calls),
            ratio(claims_alone),
            ratio(calls_alone),
            ratio(unflushed),
        );
    }
    println!();
}

/// The store's coalescing, with `COALESCE_IN_FLIGHT` batches of a kind on
/// the wire at once if set (the default otherwise).
fn coalescing(builder: PostgresStoreBuilder) -> PostgresStoreBuilder {
    match std::env::var("COALESCE_IN_FLIGHT")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        Some(batches) => builder.coalesce_in_flight(batches),
        None => builder,
    }
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
        let store = coalescing(PostgresStore::builder(&bench_url(&base)))
            .connect()
            .await?;
        store.migrate().await?;
        execute(&store, PLAIN_TABLE).await?;
        Ok::<_, StoreError>(Arc::new(store))
    });
    let store = store.unwrap_or_else(|e| panic!("cannot set the benchmark schema up: {e}"));

    // The same schema, with completions committed without a flush.
    let unflushed = rt
        .block_on(
            coalescing(PostgresStore::builder(&bench_url(&base)))
                .asynchronous_completions(true)
                .connect(),
        )
        .unwrap_or_else(|e| panic!("cannot connect: {e}"));
    let unflushed = Arc::new(unflushed);
    // The same schema, every step its own statement.
    let alone = rt
        .block_on(
            PostgresStore::builder(&bench_url(&base))
                .coalesce(false)
                .connect(),
        )
        .unwrap_or_else(|e| panic!("cannot connect: {e}"));
    let stores = Stores {
        coalesced: Arc::clone(&store),
        alone: Arc::new(alone),
        unflushed,
    };

    latency(&mut c, &rt, &store);
    throughput(&rt, &stores);
    c.final_summary();

    drop(store);
    drop(stores);
    if let Err(e) = rt.block_on(admin(
        &base,
        &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"),
    )) {
        eprintln!("could not drop the schema {SCHEMA}: {e}");
    }
}
