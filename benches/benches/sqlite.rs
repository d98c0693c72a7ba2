//! The SQLite store: a fresh call (claim, action, completion) and a replay,
//! beside the floors of one plain `INSERT` (with the same durability, on the
//! same kind of file) and one plain `SELECT` by key; then throughput with
//! several clients at once, and the statements each call sends.
//!
//! ```sh
//! cargo bench -p idempotent-benches --features sqlite --bench sqlite -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, Throughput};
use idempotent_benches::durable::{self, fresh_call, next_order, replay, timed};
use idempotent_benches::{Network, Provider, bench_run, multi_thread, refund_key};
use idempotent_tools::SqliteStore;
use idempotent_tools::call::Key;
use idempotent_tools::store::sqlite::rusqlite::{self, Connection, params};
use tokio::runtime::Runtime;

/// Calls each client makes in one round of the throughput benchmark.
const CALLS_PER_CLIENT: u64 = 16;

/// A directory for this run's files, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("idempotent-bench-sqlite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {dir:?}: {e}"));
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open_store(path: &Path) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(path).unwrap_or_else(|e| panic!("cannot open the store: {e}")))
}

/// The floor: one plain `INSERT` of a row as wide as a claim's, keyed by the
/// key's SHA-256, into a WAL file with `synchronous = FULL` (the store's
/// durability), run off the async runtime as the store runs its statements.
struct PlainInsert {
    conn: Arc<Mutex<Connection>>,
}

impl PlainInsert {
    fn open(path: &Path) -> rusqlite::Result<PlainInsert> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS plain_inserts (
                 key_digest BLOB NOT NULL PRIMARY KEY,
                 key_text TEXT NOT NULL,
                 tool TEXT NOT NULL,
                 fingerprint BLOB NOT NULL,
                 owner BLOB NOT NULL,
                 expires_at INTEGER NOT NULL
             ) STRICT",
        )?;
        Ok(PlainInsert {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn insert(&self, key: Key) {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|e| panic!("poisoned: {e}"));
            conn.prepare_cached(
                "INSERT INTO plain_inserts (key_digest, key_text, tool, fingerprint, owner, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key.digest().as_slice(),
                    key.as_str(),
                    "benches::refund",
                    [0u8; 16].as_slice(),
                    [0u8; 16].as_slice(),
                    0i64
                ])
            })
            .unwrap_or_else(|e| panic!("the plain insert failed: {e}"));
        })
        .await
        .unwrap_or_else(|e| panic!("the blocking task failed: {e}"));
    }

    /// The floor for a replay: read one row by its digest.
    async fn select(&self, key: Key) -> bool {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|e| panic!("poisoned: {e}"));
            conn.prepare_cached(
                "SELECT key_text, tool, fingerprint FROM plain_inserts WHERE key_digest = ?1",
            )
            .and_then(|mut stmt| stmt.exists(params![key.digest().as_slice()]))
            .unwrap_or_else(|e| panic!("the plain select failed: {e}"))
        })
        .await
        .unwrap_or_else(|e| panic!("the blocking task failed: {e}"))
    }
}

fn latency(c: &mut Criterion, rt: &Runtime, scratch: &Scratch) {
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let store = open_store(&scratch.path("claims.db"));
    let plain = PlainInsert::open(&scratch.path("plain.db"))
        .unwrap_or_else(|e| panic!("cannot open the plain file: {e}"));
    // How many statements one fresh call and one replay send, printed
    // before the timings.
    let (fresh, replayed) =
        durable::steps_per_call(rt, &store, &provider, &run, SqliteStore::statements);
    println!(
        "sqlite statements per call: fresh {fresh}, replay {replayed} (each one hop to the blocking pool)"
    );

    let mut group = c.benchmark_group("sqlite");
    group.bench_function("fresh_call", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                fresh_call(&store, &provider, &run, next_order()).await;
            })
        })
    });
    group.bench_function("plain_insert", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                let key = refund_key(&run, next_order()).unwrap_or_else(|e| panic!("{e}"));
                plain.insert(key).await;
            })
        })
    });
    let order_id = next_order();
    rt.block_on(fresh_call(&store, &provider, &run, order_id));
    group.bench_function("replay", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                replay(&store, &provider, &run, black_box(order_id)).await;
            })
        })
    });
    let key = refund_key(&run, order_id).unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(plain.insert(key.clone()));
    group.bench_function("plain_select", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, async || {
                assert!(plain.select(black_box(key.clone())).await);
            })
        })
    });
    group.finish();
}

/// Fresh calls per second with `clients` tasks calling at once, each on its
/// own keys: one round is `clients * CALLS_PER_CLIENT` calls.
fn throughput(c: &mut Criterion, rt: &Runtime, scratch: &Scratch) {
    let run = Arc::new(bench_run());
    let provider = Arc::new(Provider::new(Network::Instant));
    let store = open_store(&scratch.path("throughput.db"));
    let mut group = c.benchmark_group("sqlite_clients");
    for clients in [1u64, 4, 16] {
        group.throughput(Throughput::Elements(clients * CALLS_PER_CLIENT));
        group.bench_with_input(
            BenchmarkId::new("fresh_calls", clients),
            &clients,
            |b, &clients| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = Instant::now();
                        for _ in 0..iters {
                            let tasks: Vec<_> = (0..clients)
                                .map(|_| {
                                    let (store, provider, run) = (
                                        Arc::clone(&store),
                                        Arc::clone(&provider),
                                        Arc::clone(&run),
                                    );
                                    tokio::spawn(async move {
                                        for _ in 0..CALLS_PER_CLIENT {
                                            fresh_call(&store, &provider, &run, next_order()).await;
                                        }
                                    })
                                })
                                .collect();
                            for task in tasks {
                                task.await
                                    .unwrap_or_else(|e| panic!("a client failed: {e}"));
                            }
                        }
                        start.elapsed()
                    })
                })
            },
        );
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let rt = multi_thread();
    let scratch = Scratch::new();
    latency(&mut c, &rt, &scratch);
    throughput(&mut c, &rt, &scratch);
    c.final_summary();
}
