//! Purging under traffic: the latency of whole fresh calls from 8 clients
//! at once (median and p99), without a purge and while a purge removes a
//! million expired records in batches: `Purger::purge_now`, the purge a
//! `Purger` runs, which with no pause is `Records::purge_expired`, the
//! CLI's `purge`.
//!
//! ```sh
//! BENCH_RUN=1 cargo bench -p idempotent-benches --features sqlite,postgres --bench purge
//! ```
//!
//! Each run fills a million expired records first (Postgres: a schema
//! `idempotent_purge`; SQLite: `purge.sqlite` in `SIZE_DIR`, the system's
//! temporary folder by default), and drops them at the end.
//! `PURGE_STORES` (default `sqlite,postgres`), `PURGE_RECORDS` (default
//! 1000000), `PURGE_SECONDS` (how long the calls run without a purge,
//! default 10), `PURGE_CLIENTS` (default 8), `PURGE_BATCH` (rows per
//! purge statement, the stores' default otherwise) and `PURGE_PAUSE_MS`
//! (the purger's pause between batches, default 0) change a run. Figures
//! go to `benches/results/purge.csv`, under the store's name with
//! ` paced` added when the pause is not zero.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idempotent_benches::durable::{self, fresh_call, next_order};
use idempotent_benches::scale::{self, Expiry};
use idempotent_benches::{Network, Provider, bench_run, multi_thread, results};
use idempotent_tools::{
    PostgresStore, SqliteStore,
    records::{Purger, Records},
    store::Store,
};
use tokio::runtime::Runtime;

fn env_u64(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs fresh calls from `clients` tasks until `stop` is set; returns each
/// call's latency.
async fn calls<S: Store>(store: &Arc<S>, clients: u64, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let run = Arc::new(bench_run());
    let provider = Arc::new(Provider::new(Network::Instant));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (store, run, provider, stop) = (
                Arc::clone(store),
                Arc::clone(&run),
                Arc::clone(&provider),
                Arc::clone(&stop),
            );
            tokio::spawn(async move {
                let mut times = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    fresh_call(&store, &provider, &run, next_order()).await;
                    times.push(start.elapsed());
                }
                times
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(
            task.await
                .unwrap_or_else(|e| panic!("a client failed: {e}")),
        );
    }
    all
}

/// Measures `store`'s calls without a purge, then during one, and keeps
/// both.
fn measure<S: Store + Records>(rt: &Runtime, store_name: &str, store: Arc<S>) {
    let name = if env_u64("PURGE_PAUSE_MS", 0) == 0 {
        store_name.to_owned()
    } else {
        format!("{store_name} paced")
    };
    let name = name.as_str();
    let clients = env_u64("PURGE_CLIENTS", 8);
    let seconds = env_u64("PURGE_SECONDS", 10);
    rt.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let running = tokio::spawn({
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            async move { calls(&store, clients, stop).await }
        });
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut without = running.await.unwrap_or_else(|e| panic!("{e}"));

        let stop = Arc::new(AtomicBool::new(false));
        let running = tokio::spawn({
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            async move { calls(&store, clients, stop).await }
        });
        let start = Instant::now();
        let pause = Duration::from_millis(env_u64("PURGE_PAUSE_MS", 0));
        let purged = Purger::purge_now(&*store, pause)
            .await
            .unwrap_or_else(|e| panic!("the purge failed: {e}"));
        let took = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let mut during = running.await.unwrap_or_else(|e| panic!("{e}"));

        let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
        let without_rate = rate(without.len(), Duration::from_secs(seconds));
        let during_rate = rate(during.len(), took);
        for (phase, samples, per_second) in [
            ("without", &mut without, without_rate),
            ("during", &mut during, during_rate),
        ] {
            let (median, p99) = scale::median_p99(samples);
            println!(
                "{name:>8} {phase:<8} {:>7} calls, {per_second:>6.0}/s  median {median:>8.1} µs  p99 {p99:>8.1} µs",
                samples.len()
            );
            results::purge(name, phase, median, p99);
        }
        println!(
            "{name:>8} purged {purged} records in {:.1} s ({:.0} per second)",
            took.as_secs_f64(),
            purged as f64 / took.as_secs_f64()
        );
    });
}

fn sqlite(rt: &Runtime, records: u64) {
    let dir = std::env::var_os("SIZE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join("purge.sqlite");
    let remove = || {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    };
    remove();
    drop(SqliteStore::open(&path).unwrap_or_else(|e| panic!("{e}")));
    let start = Instant::now();
    scale::fill_sqlite(&path, 0, records, Expiry::Expired).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "  sqlite filled {records} expired records in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let mut builder = SqliteStore::builder(&path);
    if let Some(batch) = std::env::var("PURGE_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        builder = builder.purge_batch(batch);
    }
    let store = Arc::new(builder.open().unwrap_or_else(|e| panic!("{e}")));
    measure(rt, "sqlite", store);
    remove();
}

fn postgres(rt: &Runtime, records: u64) {
    const SCHEMA: &str = "idempotent_purge";
    let base = durable::server_url(
        "IDEMPOTENT_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    );
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{SCHEMA}");
    let store = rt.block_on(async {
        let admin = PostgresStore::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = admin.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA};"
            ))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut builder = PostgresStore::builder(&url);
        if let Some(batch) = std::env::var("PURGE_BATCH")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            builder = builder.purge_batch(batch);
        }
        let store = builder.connect().await.unwrap_or_else(|e| panic!("{e}"));
        store.migrate().await.unwrap_or_else(|e| panic!("{e}"));
        let filler = store.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        scale::fill_postgres(&filler, 0, records, Expiry::Expired, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        println!(
            "postgres filled {records} expired records in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        Arc::new(store)
    });
    measure(rt, "postgres", Arc::clone(&store));
    drop(store);
    rt.block_on(async {
        let admin = PostgresStore::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = admin.pool().get().await.unwrap_or_else(|e| panic!("{e}"));
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
}

fn main() {
    let rt = multi_thread();
    let records = env_u64("PURGE_RECORDS", 1_000_000);
    let stores = std::env::var("PURGE_STORES").unwrap_or_else(|_| "sqlite,postgres".to_owned());
    println!(
        "run {}, load average {}",
        results::run_label(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    for store in stores.split(',') {
        match store.trim() {
            "sqlite" => sqlite(&rt, records),
            "postgres" => postgres(&rt, records),
            other => panic!("PURGE_STORES: no store {other}"),
        }
    }
}
