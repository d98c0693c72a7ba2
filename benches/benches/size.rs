//! Cost against size: claim, completion and replay latency (median and
//! p99 over sequential calls) on stores holding 10 thousand and 10 million
//! records, and the memory store's bytes per record.
//!
//! ```sh
//! SIZE_DIR=/var/tmp BENCH_RUN=1 cargo bench -p idempotent-benches --features sqlite,postgres --bench size
//! ```
//!
//! The first run fills each store once and keeps it (Postgres: a schema
//! `idempotent_size_<records>` per size; SQLite: `size-<records>.sqlite`
//! in `SIZE_DIR`, the system's temporary folder by default), so later runs
//! measure the same tables; `SIZE_DROP=1` drops them all and measures
//! nothing. `SIZE_RECORDS` (default `10000,10000000`), `SIZE_CALLS`
//! (default 2000 calls per step) and `SIZE_STORES` (default
//! `memory,sqlite,postgres`) narrow a run. Figures go to
//! `benches/results/size.csv` and, for the memory store's bytes per record
//! (resident memory grown by the fill, divided by the records),
//! `benches/results/memory.csv`.

use std::time::Instant;

use idempotent_benches::scale::{self, Expiry};
use idempotent_benches::{bench_run, multi_thread, refund_key, results};
use idempotent_tools::{
    MemoryStore,
    call::ToolId,
    records::RecordState,
    store::{ClaimAnswer, Completion, RecordValue, Store},
};
use tokio::runtime::Runtime;

fn env_list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn records() -> Vec<u64> {
    env_list("SIZE_RECORDS", "10000,10000000")
        .iter()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|e| panic!("SIZE_RECORDS: {s}: {e}"))
        })
        .collect()
}

fn calls() -> usize {
    std::env::var("SIZE_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

/// A seed for this run's random replays.
fn seed() -> u64 {
    results::run_label()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

async fn report<S: Store>(store_name: &str, store: &S, records: u64) {
    for (step, mut samples) in scale::step_latencies(store, records, calls(), seed()).await {
        let (median, p99) = scale::median_p99(&mut samples);
        println!(
            "{store_name:>8} {records:>10} records  {step:<10}  median {median:>8.1} µs  p99 {p99:>8.1} µs"
        );
        results::size(store_name, records, step, median, p99);
    }
}

/// Resident memory of this process, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Fills a memory store through its own steps (claim, then completion for
/// all but the held ones) and measures it.
fn memory(rt: &Runtime, records: u64) {
    rt.block_on(async {
        let store = MemoryStore::new();
        let run = bench_run();
        let tool = ToolId::new(idempotent_benches::TOOL);
        let before = resident_bytes();
        let start = Instant::now();
        for n in 0..records {
            let key = refund_key(&run, n).unwrap_or_else(|e| panic!("{e}"));
            let Ok(ClaimAnswer::Claimed(claim)) = store.claim(scale::request(&key, &tool)).await
            else {
                panic!("a new key must be claimed");
            };
            if !scale::is_held(n, Expiry::Live) {
                let finished = Completion {
                    state: RecordState::Done,
                    value: RecordValue::from_json(scale::result_json(n)),
                    completed_at: std::time::SystemTime::now(),
                };
                store
                    .complete(&claim, finished)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        let grown = resident_bytes().saturating_sub(before);
        let per_record = grown as f64 / records as f64;
        println!(
            "  memory {records:>10} records  filled in {:.1} s, resident memory grew {:.0} MiB: \
             {per_record:.0} bytes per record",
            start.elapsed().as_secs_f64(),
            grown as f64 / 1048576.0
        );
        results::append(
            "memory.csv",
            "records,run,bytes_per_record",
            &[&records, &results::run_label(), &format!("{per_record:.0}")],
        );
        report("memory", &store, records).await;
    });
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use idempotent_tools::SqliteStore;
    use std::path::PathBuf;

    fn dir() -> PathBuf {
        std::env::var_os("SIZE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
    }

    fn path(records: u64) -> PathBuf {
        dir().join(format!("size-{records}.sqlite"))
    }

    fn marker(records: u64) -> PathBuf {
        dir().join(format!("size-{records}.filled"))
    }

    pub fn drop_all(records: &[u64]) {
        for &n in records {
            for suffix in ["", "-wal", "-shm"] {
                let mut file = path(n).into_os_string();
                file.push(suffix);
                let _ = std::fs::remove_file(file);
            }
            let _ = std::fs::remove_file(marker(n));
        }
    }

    pub fn measure(rt: &Runtime, records: u64) {
        if !marker(records).exists() {
            drop_all(&[records]);
            drop(SqliteStore::open(path(records)).unwrap_or_else(|e| panic!("{e}")));
            let start = Instant::now();
            scale::fill_sqlite(&path(records), 0, records, Expiry::Live)
                .unwrap_or_else(|e| panic!("filling {}: {e}", path(records).display()));
            println!(
                "  sqlite {records:>10} records  filled in {:.1} s",
                start.elapsed().as_secs_f64()
            );
            std::fs::write(marker(records), b"").unwrap_or_else(|e| panic!("{e}"));
        }
        let store = SqliteStore::open(path(records)).unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(report("sqlite", &store, records));
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use idempotent_benches::durable;
    use idempotent_tools::PostgresStore;

    const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

    fn base() -> String {
        durable::server_url("IDEMPOTENT_POSTGRES_URL", DEFAULT_URL)
    }

    fn schema(records: u64) -> String {
        format!("idempotent_size_{records}")
    }

    fn url(records: u64) -> String {
        let base = base();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-c%20search_path%3D{}", schema(records))
    }

    async fn admin(sql: &str) {
        let store = PostgresStore::connect(&base())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = store.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    pub fn drop_all(rt: &Runtime, records: &[u64]) {
        for &n in records {
            rt.block_on(admin(&format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                schema(n)
            )));
        }
    }

    pub fn measure(rt: &Runtime, records: u64) {
        rt.block_on(async {
            let store = PostgresStore::connect(&url(records))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let client = store.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
            let filled = client
                .query_opt(
                    "SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'filled'",
                    &[&schema(records)],
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .is_some();
            if !filled {
                let s = schema(records);
                client
                    .batch_execute(&format!(
                        "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s};"
                    ))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                store.migrate().await.unwrap_or_else(|e| panic!("{e}"));
                let start = Instant::now();
                scale::fill_postgres(&client, 0, records, Expiry::Live, true)
                    .await
                    .unwrap_or_else(|e| panic!("filling {s}: {e}"));
                client
                    .batch_execute("CREATE TABLE filled ()")
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                println!(
                    "postgres {records:>10} records  filled in {:.1} s",
                    start.elapsed().as_secs_f64()
                );
            }
            drop(client);
            report("postgres", &store, records).await;
        });
    }
}

fn main() {
    let rt = multi_thread();
    let records = records();
    let stores = env_list("SIZE_STORES", "memory,sqlite,postgres");
    let wants = |name: &str| stores.iter().any(|s| s == name);
    if std::env::var_os("SIZE_DROP").is_some() {
        #[cfg(feature = "sqlite")]
        sqlite::drop_all(&records);
        #[cfg(feature = "postgres")]
        postgres::drop_all(&rt, &records);
        println!("dropped the filled stores");
        return;
    }
    println!(
        "run {}, load average {}",
        results::run_label(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    for &n in &records {
        if wants("memory") {
            memory(&rt, n);
        }
        #[cfg(feature = "sqlite")]
        if wants("sqlite") {
            sqlite::measure(&rt, n);
        }
        #[cfg(feature = "postgres")]
        if wants("postgres") {
            postgres::measure(&rt, n);
        }
    }
}
