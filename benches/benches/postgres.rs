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
//! 0 skips the throughput table; `THROUGHPUT_CLIENTS` (as in `"16 64"`)
//! which client counts it measures. Beside it, a table of CPU time per
//! operation: pgbench's own and the server's for an insert, the bench
//! process's and the server's for a fresh call (`src/cpu.rs`).
//! `COALESCE_IN_FLIGHT` sets the coalescing
//! stores' `coalesce_in_flight` (default: a quarter of the pool's size).

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use idempotent_benches::durable::{
    self, Client, ClientWork, backend, fresh_call, next_order, replay, timed, unavailable,
};
use idempotent_benches::{Network, Provider, bench_run, cpu, multi_thread, refund_key, results};
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::{PostgresStore, call::Key, store::StoreError};
use tokio::runtime::Runtime;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA: &str = "idempotent_bench";
const CLIENTS: [u64; 4] = [1, 4, 16, 64];
/// The server's processes, whose CPU the throughput table counts.
const SERVER: &str = "postgres";

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

/// How many completed records the claims table holds before anything is
/// measured: `RECORDS_BEFORE`, 100,000 by default.
fn records_before() -> u64 {
    std::env::var("RECORDS_BEFORE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

/// Fills the claims table with `records` completed records (then the
/// server vacuums the table and gathers its statistics): a store in service holds records, and its
/// statements are planned for a table of that size. On a new, empty table,
/// each connection may keep a plan made for a table of a few rows (a
/// sequential scan) until autovacuum next analyses it, and the batches of
/// the first minute scan the whole table (BENCHMARKS.md section 4).
fn prefill(records: u64) -> String {
    format!(
        "INSERT INTO idempotent_claims (key_digest, key_text, tool, fingerprint, state, owner, \
             fence, taken_over, result, completed_at, expires_at) \
         SELECT sha256(('before:' || g)::bytea), 'before:' || g, 'benches::refund', \
             '\\x00000000000000000000000000000000'::bytea, 'done', \
             '\\x00000000000000000000000000000000'::bytea, 1, false, '{{}}', now(), \
             now() + interval '1 day' \
         FROM generate_series(1, {records}) AS g"
    )
}

/// pgbench's inserts per second with `clients` clients, from
/// `benches/pgbench/run.sh`, with the CPU it took (pgbench itself as this
/// process's child, the server); `None` if pgbench could not run.
fn pgbench(clients: u64, seconds: u64) -> Option<(f64, cpu::PerOp)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench/run.sh");
    let before = cpu::sample(SERVER);
    let output = Command::new("bash")
        .arg(script)
        .env("CLIENTS", clients.to_string())
        .env("SECONDS_EACH", seconds.to_string())
        .output()
        .ok()?;
    let after = cpu::sample(SERVER);
    if !output.status.success() {
        eprintln!(
            "pgbench failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    let tps: f64 = String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| {
            let cells: Vec<_> = line.split('|').map(str::trim).collect();
            (cells.get(1)?.parse::<u64>().ok()? == clients).then(|| cells.get(2)?.parse().ok())?
        })?;
    Some((
        tps,
        cpu::PerOp::between(before, after, tps * seconds as f64),
    ))
}

/// What the server has written to its WAL so far: records, full-page
/// images, bytes (`pg_stat_wal`, Postgres 14 and later; zeros before).
async fn wal(store: &PostgresStore) -> [i64; 3] {
    let Ok(client) = store.pool().get().await else {
        return [0; 3];
    };
    let row = client
        .query_one(
            "SELECT wal_records::bigint, wal_fpi::bigint, wal_bytes::bigint FROM pg_stat_wal",
            &[],
        )
        .await;
    row.map_or([0; 3], |row| [row.get(0), row.get(1), row.get(2)])
}

/// WAL per operation between two [`wal`] samples: records, full-page
/// images, bytes.
fn wal_per_op(before: [i64; 3], after: [i64; 3], ops: f64) -> [f64; 3] {
    [0, 1, 2].map(|i| (after[i] - before[i]) as f64 / ops)
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
    let mut cpu_rows = Vec::new();
    println!();
    println!("Postgres throughput, {seconds} s per point, pgbench measured just before:");
    println!();
    println!(
        "| clients | pgbench inserts/s | claims/s | ÷ pgbench | fresh calls/s | ÷ pgbench \
         | claims/s, not coalesced | ÷ pgbench | fresh calls/s, not coalesced | ÷ pgbench \
         | fresh calls/s, asynchronous completions | ÷ pgbench |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for clients in durable::throughput_clients(&CLIENTS) {
        let wal_0 = rt.block_on(wal(&stores.coalesced));
        let pgbench = pgbench(clients, seconds);
        let wal_1 = rt.block_on(wal(&stores.coalesced));
        let inserts = pgbench.map(|(tps, _)| tps);
        let claims = durable::rate(rt, &stores.coalesced, clients, Work::Claim, for_how_long);
        let wal_2 = rt.block_on(wal(&stores.coalesced));
        let calls = durable::measure(
            rt,
            &stores.coalesced,
            clients,
            Work::FreshCall,
            for_how_long,
            SERVER,
        );
        let wal_3 = rt.block_on(wal(&stores.coalesced));
        let claims_alone = durable::rate(rt, &stores.alone, clients, Work::Claim, for_how_long);
        let alone = durable::measure(
            rt,
            &stores.alone,
            clients,
            Work::FreshCall,
            for_how_long,
            SERVER,
        );
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
        results::throughput("postgres", "fresh call", clients, calls.per_second);
        let ratio = |x: f64| inserts.map_or("n/a".to_owned(), |i| format!("{:.2}", x / i));
        println!(
            "| {clients} | {} | {claims:.0} | {} | {:.0} | {} | {claims_alone:.0} | {} \
             | {:.0} | {} | {unflushed:.0} | {} |",
            inserts.map_or("n/a".to_owned(), |i| format!("{i:.0}")),
            ratio(claims),
            calls.per_second,
            ratio(calls.per_second),
            ratio(claims_alone),
            alone.per_second,
            ratio(alone.per_second),
            ratio(unflushed),
        );
        let inserts_wal = wal_per_op(wal_0, wal_1, inserts.unwrap_or(f64::NAN) * seconds as f64);
        let calls_wal = wal_per_op(wal_2, wal_3, calls.ops);
        cpu_rows.push((
            clients,
            pgbench.map(|(_, cpu)| cpu),
            calls.cpu,
            alone.cpu,
            inserts_wal,
            calls_wal,
        ));
    }
    println!();
    println!("CPU per operation, µs (this machine's cores are shared by all three):");
    println!();
    println!(
        "| clients | pgbench: pgbench | pgbench: server | fresh call: bench | fresh call: server \
         | not coalesced: bench | not coalesced: server \
         | WAL per insert: records, full pages, bytes | WAL per fresh call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (clients, pgbench, calls, alone, inserts_wal, calls_wal) in cpu_rows {
        let [peer, peer_server] = cpu::peer_cells(pgbench);
        let wal = |w: [f64; 3]| format!("{:.1}, {:.2}, {:.0}", w[0], w[1], w[2]);
        println!(
            "| {clients} | {peer} | {peer_server} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
            calls.own,
            calls.server,
            alone.own,
            alone.server,
            wal(inserts_wal),
            wal(calls_wal),
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
        execute(&store, &prefill(records_before())).await?;
        execute(&store, "VACUUM ANALYZE idempotent_claims").await?;
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
