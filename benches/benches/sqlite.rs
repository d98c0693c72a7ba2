//! The SQLite store: a fresh call (claim, action, completion) and a replay,
//! beside the floors of one plain `INSERT` (with the same durability, on the
//! same kind of file) and one plain `SELECT` by key; then calls per second
//! with 1, 4 and 16 clients at once beside plain inserts (kept as rows in
//! `benches/results/throughput.csv`), and the statements each call sends.
//!
//! ```sh
//! cargo bench -p idempotent-benches --features sqlite --bench sqlite -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! `THROUGHPUT_SECONDS` (default 5) sets how long each calls-per-second
//! figure runs.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Criterion;
use idempotent_benches::durable::{self, fresh_call, next_order, replay, timed};
use idempotent_benches::{Network, Provider, bench_run, multi_thread, refund_key, results};
use idempotent_tools::call::Key;
use idempotent_tools::store::sqlite::rusqlite::{self, Connection, params};
use idempotent_tools::{Run, SqliteStore};
use tokio::runtime::Runtime;

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
        "sqlite steps per call: fresh {fresh}, replay {replayed} (each one trip to the writer thread)"
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

/// Rounds of the one-caller comparison.
const ROUNDS: usize = 400;

/// One caller, the variants interleaved call by call: a fresh call and a
/// plain insert, then a replay and a plain select, each pair in both orders
/// by turns, [`ROUNDS`] times, each call timed alone.
/// Medians of the four, so that the machine's load falls on them alike
/// (criterion's figures above run each variant for seconds before the
/// next, and drift with the load in between).
fn one_caller(rt: &Runtime, scratch: &Scratch) {
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let store = open_store(&scratch.path("one-caller.db"));
    let plain = PlainInsert::open(&scratch.path("one-caller-plain.db"))
        .unwrap_or_else(|e| panic!("cannot open the plain file: {e}"));
    let replayed = next_order();
    rt.block_on(fresh_call(&store, &provider, &run, replayed));
    let selected = refund_key(&run, replayed).unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(plain.insert(selected.clone()));
    let mut times: [Vec<Duration>; 4] = Default::default();
    rt.block_on(async {
        for round in 0..ROUNDS + ROUNDS / 8 {
            // Each pair in both orders by turns: a flush right after
            // another costs more than one after a read.
            let (mut fresh, mut insert) = (Duration::ZERO, Duration::ZERO);
            for first in [round % 2 == 0, round % 2 != 0] {
                let start = Instant::now();
                if first {
                    fresh_call(&store, &provider, &run, next_order()).await;
                    fresh = start.elapsed();
                } else {
                    let key = refund_key(&run, next_order()).unwrap_or_else(|e| panic!("{e}"));
                    plain.insert(key).await;
                    insert = start.elapsed();
                }
            }
            let (mut replay_took, mut select) = (Duration::ZERO, Duration::ZERO);
            for first in [round % 2 == 0, round % 2 != 0] {
                let start = Instant::now();
                if first {
                    replay(&store, &provider, &run, black_box(replayed)).await;
                    replay_took = start.elapsed();
                } else {
                    assert!(plain.select(black_box(selected.clone())).await);
                    select = start.elapsed();
                }
            }
            // The first rounds warm up.
            if round >= ROUNDS / 8 {
                for (i, took) in [fresh, insert, replay_took, select].into_iter().enumerate() {
                    times[i].push(took);
                }
            }
        }
    });
    let [fresh, insert, replayed, select] = times.map(|mut v| {
        v.sort();
        v[v.len() / 2]
    });
    println!(
        "\nsqlite, one caller, {ROUNDS} rounds interleaved (medians): fresh call {fresh:?}, plain insert {insert:?}: {:.2}×; replay {replayed:?}, plain select {select:?}: {:.2}×",
        fresh.as_secs_f64() / insert.as_secs_f64(),
        replayed.as_secs_f64() / select.as_secs_f64()
    );
}

/// What one client does once in the throughput table.
#[derive(Clone, Copy, PartialEq)]
enum Work {
    /// A whole guarded call: claim, action, completion.
    FreshCall,
    /// Two plain `INSERT`s one after the other: the floor of a call that
    /// commits twice, as a fresh call does (its claim, then its
    /// completion).
    TwoInserts,
    /// One plain `INSERT`, its own transaction.
    PlainInsert,
}

impl Work {
    const ALL: [Work; 3] = [Work::FreshCall, Work::TwoInserts, Work::PlainInsert];

    fn name(self) -> &'static str {
        match self {
            Work::FreshCall => "fresh call",
            Work::TwoInserts => "two plain inserts",
            Work::PlainInsert => "plain insert",
        }
    }
}

/// The floors and the store a client works on.
struct Bench {
    store: Arc<SqliteStore>,
    plain: PlainInsert,
    provider: Provider,
    run: Run,
}

impl Bench {
    async fn once(&self, work: Work) {
        let order_id = next_order();
        match work {
            Work::FreshCall => fresh_call(&self.store, &self.provider, &self.run, order_id).await,
            Work::TwoInserts => {
                for order_id in [order_id, next_order()] {
                    let key = refund_key(&self.run, order_id).unwrap_or_else(|e| panic!("{e}"));
                    self.plain.insert(key).await;
                }
            }
            Work::PlainInsert => {
                let key = refund_key(&self.run, order_id).unwrap_or_else(|e| panic!("{e}"));
                self.plain.insert(key).await;
            }
        }
    }
}

/// Calls per second with `clients` tasks at once, each on its own keys:
/// the fresh call, two plain inserts in a row, and one plain insert,
/// measured in turns of [`TURN`] each, so that a change in the
/// machine's load falls on all three alike. Each figure is kept as a row
/// for the plots.
fn throughput(rt: &Runtime, scratch: &Scratch) {
    let Some(seconds) = durable::throughput_seconds() else {
        return;
    };
    let turns = (Duration::from_secs(seconds).as_millis() / TURN.as_millis()).max(1) as u32;
    let bench = Arc::new(Bench {
        store: open_store(&scratch.path("throughput.db")),
        plain: PlainInsert::open(&scratch.path("throughput-plain.db"))
            .unwrap_or_else(|e| panic!("cannot open the plain file: {e}")),
        provider: Provider::new(Network::Instant),
        run: bench_run(),
    });
    println!(
        "\nsqlite calls per second ({seconds} s per figure, in turns of {} ms):",
        TURN.as_millis()
    );
    println!(
        "| clients | fresh call | two plain inserts | plain insert | fresh ÷ insert | transactions per fresh call |"
    );
    println!("|---|---|---|---|---|---|");
    for clients in [1u64, 4, 16] {
        let mut done = [0u64; 3];
        let mut spent = [Duration::ZERO; 3];
        let mut transactions = 0;
        for _ in 0..turns {
            for (i, work) in Work::ALL.into_iter().enumerate() {
                let before = bench.store.transactions();
                let (calls, took) = rt.block_on(turn(&bench, clients, work));
                if work == Work::FreshCall {
                    transactions += bench.store.transactions() - before;
                }
                done[i] += calls;
                spent[i] += took;
            }
        }
        let rate = |i: usize| done[i] as f64 / spent[i].as_secs_f64();
        for (i, work) in Work::ALL.into_iter().enumerate() {
            if work != Work::TwoInserts {
                results::throughput("sqlite", work.name(), clients, rate(i));
            }
        }
        println!(
            "| {clients} | {:.0} | {:.0} | {:.0} | {:.2}× | {:.2} |",
            rate(0),
            rate(1),
            rate(2),
            rate(0) / rate(2),
            transactions as f64 / done[0] as f64
        );
    }
}

/// How long each kind of work runs before the next takes its turn.
const TURN: Duration = Duration::from_millis(500);

/// One turn: `clients` tasks doing `work` until the turn is over; the calls
/// done and the time they took.
async fn turn(bench: &Arc<Bench>, clients: u64, work: Work) -> (u64, Duration) {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + TURN;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (bench, done) = (Arc::clone(bench), Arc::clone(&done));
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    bench.once(work).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await
            .unwrap_or_else(|e| panic!("a client failed: {e}"));
    }
    (done.load(Ordering::Relaxed), start.elapsed())
}

fn main() {
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let rt = multi_thread();
    let scratch = Scratch::new();
    latency(&mut c, &rt, &scratch);
    c.final_summary();
    one_caller(&rt, &scratch);
    throughput(&rt, &scratch);
}
