//! What the size and purge benchmarks share: tables filled fast with
//! records shaped as the stores write them, and latency samples read as
//! median and p99.
//!
//! Filled records are the refund tool's, keyed `<run>:refund:<n>` under the
//! benchmark's run, with the empty fingerprint (what a bare
//! `Store::claim` sends): one in a hundred (`n % 100 == 0`) is a held claim
//! with a day's lease, the rest are done, with expiries spread over a month
//! (or, for a purge, over the past day).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idempotent_tools::{
    Run,
    call::{DEFAULT_LEASE, DEFAULT_RETENTION, Fingerprint, Key, ToolId},
    records::RecordState,
    store::{ClaimAnswer, ClaimRequest, Completion, RecordValue, Store},
};

use crate::{TOOL, bench_run, refund_key};

/// Whether filled records are live (expiring over the next month) or
/// expired (over the past day), for a purge to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Expiring over the next month; one in a hundred held.
    Live,
    /// Expired over the past day; all done.
    Expired,
}

/// The text every filled key starts with, before its number.
pub fn key_prefix(run: &Run) -> String {
    let key = refund_key(run, 0).unwrap_or_else(|e| panic!("{e}"));
    let text = key.as_str();
    text.strip_suffix('0')
        .unwrap_or_else(|| panic!("a refund key ends with its order id: {text}"))
        .to_owned()
}

/// Whether filled record `n` is a held claim.
pub fn is_held(n: u64, expiry: Expiry) -> bool {
    expiry == Expiry::Live && n.is_multiple_of(100)
}

/// The refund result recorded for order `n`, as JSON.
pub fn result_json(n: u64) -> String {
    format!("{{\"id\":{n},\"order_id\":{n},\"usd\":42}}")
}

/// The median and the 99th percentile of `samples`, in microseconds.
pub fn median_p99(samples: &mut [Duration]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[i].as_secs_f64() * 1e6
    };
    (at(0.5), at(0.99))
}

/// A small, seeded generator for the replays' random keys.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator seeded with `seed` (not zero).
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    /// The next number below `bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }
}

/// A run no earlier process used: the fresh claims' keys are under it.
pub fn fresh_run() -> Run {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    Run::new(format!("fresh-{nanos}")).unwrap_or_else(|e| panic!("{e}"))
}

/// Claim, completion and replay latencies over `calls` sequential calls
/// each on a store filled with `records` live records: claims of new keys,
/// the completions of those claims, and replays of filled records picked
/// at random across the table.
pub async fn step_latencies<S: Store>(
    store: &S,
    records: u64,
    calls: usize,
    seed: u64,
) -> [(&'static str, Vec<Duration>); 3] {
    let tool = ToolId::new(TOOL);
    let fresh = fresh_run();
    let mut claims = Vec::with_capacity(calls);
    let mut claim_times = Vec::with_capacity(calls);
    for n in 0..calls as u64 {
        let key = refund_key(&fresh, n).unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        let answer = store.claim(request(&key, &tool)).await;
        claim_times.push(start.elapsed());
        match answer {
            Ok(ClaimAnswer::Claimed(claim)) => claims.push((n, claim)),
            other => panic!("a new key must be claimed: {other:?}"),
        }
    }
    let mut completion_times = Vec::with_capacity(calls);
    for (n, claim) in &claims {
        let finished = Completion {
            state: RecordState::Done,
            value: RecordValue::from_json(result_json(*n)),
            completed_at: SystemTime::now(),
        };
        let start = Instant::now();
        let done = store.complete(claim, finished).await;
        completion_times.push(start.elapsed());
        done.unwrap_or_else(|e| panic!("the completion failed: {e}"));
    }
    let run = bench_run();
    let mut random = XorShift::new(seed);
    let mut replay_times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let mut n = random.below(records);
        if is_held(n, Expiry::Live) {
            n = (n + 1) % records.max(2);
        }
        let key = refund_key(&run, n).unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        let answer = store.claim(request(&key, &tool)).await;
        replay_times.push(start.elapsed());
        assert!(
            matches!(answer, Ok(ClaimAnswer::Completed(_))),
            "record {n} must replay: {answer:?}"
        );
    }
    [
        ("claim", claim_times),
        ("completion", completion_times),
        ("replay", replay_times),
    ]
}

/// A bare claim of `key` for the refund tool with the empty fingerprint.
pub fn request<'a>(key: &'a Key, tool: &'a ToolId) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool,
        fingerprint: Fingerprint::EMPTY,
        lease: DEFAULT_LEASE,
        retention: DEFAULT_RETENTION,
    }
}

/// Fills a Postgres claims table with `count` records numbered from
/// `first`: one `INSERT .. SELECT generate_series`, keys digested by the
/// server's `sha256`. With `rebuild`, the table's indexes are dropped first
/// and built again after, which is faster than growing them row by row.
#[cfg(feature = "postgres")]
pub async fn fill_postgres(
    client: &idempotent_tools::store::postgres::tokio_postgres::Client,
    first: u64,
    count: u64,
    expiry: Expiry,
    rebuild: bool,
) -> Result<(), idempotent_tools::store::postgres::tokio_postgres::Error> {
    let prefix = key_prefix(&bench_run()).replace('\'', "''");
    let last = first + count - 1;
    let (state, lease, result, completed, expires) = match expiry {
        Expiry::Live => (
            "CASE WHEN i % 100 = 0 THEN 'held' ELSE 'done' END",
            "CASE WHEN i % 100 = 0 THEN now() + interval '1 day' END",
            "CASE WHEN i % 100 <> 0 THEN '{\"id\":' || i || ',\"order_id\":' || i || ',\"usd\":42}' END",
            "CASE WHEN i % 100 <> 0 THEN now() - (i % 86400) * interval '1 second' END",
            "now() + interval '1 day' + (i % 2592000) * interval '1 second'",
        ),
        Expiry::Expired => (
            "'done'",
            "NULL::timestamptz",
            "'{\"id\":' || i || ',\"order_id\":' || i || ',\"usd\":42}'",
            "now() - interval '8 days'",
            "now() - interval '1 minute' - (i % 86400) * interval '1 second'",
        ),
    };
    let drop = "SET maintenance_work_mem = '1GB';
        DROP INDEX IF EXISTS idempotent_claims_expires_at;
        DROP INDEX IF EXISTS idempotent_claims_tool_state;
        ALTER TABLE idempotent_claims DROP CONSTRAINT IF EXISTS idempotent_claims_pkey;";
    let build = "ALTER TABLE idempotent_claims ADD PRIMARY KEY (key_digest);
        CREATE INDEX idempotent_claims_expires_at ON idempotent_claims (expires_at);
        CREATE INDEX idempotent_claims_tool_state ON idempotent_claims (tool, state);";
    if rebuild {
        client.batch_execute(drop).await?;
    }
    client
        .batch_execute(&format!(
            "INSERT INTO idempotent_claims
                 (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
                  lease_until, result, completed_at, expires_at)
             SELECT sha256(convert_to('{prefix}' || i, 'UTF8')), '{prefix}' || i, '{TOOL}',
                    '\\x00000000000000000000000000000000'::bytea, {state},
                    substr(sha256(int8send(i)), 1, 16), 1, false, {lease}, {result},
                    {completed}, {expires}
             FROM generate_series({first}::bigint, {last}::bigint) AS i"
        ))
        .await?;
    if rebuild {
        client.batch_execute(build).await?;
    }
    client
        .batch_execute("VACUUM ANALYZE idempotent_claims")
        .await
}

/// Fills a SQLite store's file with `count` records numbered from `first`:
/// one transaction of prepared inserts.
#[cfg(feature = "sqlite")]
pub fn fill_sqlite(
    path: &std::path::Path,
    first: u64,
    count: u64,
    expiry: Expiry,
) -> idempotent_tools::store::sqlite::rusqlite::Result<()> {
    let mut conn = idempotent_tools::store::sqlite::rusqlite::Connection::open(path)?;
    conn.execute_batch("PRAGMA cache_size = -1000000; PRAGMA synchronous = OFF;")?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    let run = bench_run();
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO idempotent_claims
                 (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
                  lease_until, result, completed_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, 0, ?7, ?8, ?9, ?10)",
        )?;
        let day = 86_400_000i64;
        for n in first..first + count {
            let key = refund_key(&run, n).unwrap_or_else(|e| panic!("{e}"));
            let spread = (n % 86_400) as i64 * 1000;
            let held = is_held(n, expiry);
            let owner = &key.digest()[16..];
            let (lease, result, completed, expires) = match (expiry, held) {
                (Expiry::Live, true) => (Some(now + day), None, None, now + 8 * day),
                (Expiry::Live, false) => (
                    None,
                    Some(result_json(n)),
                    Some(now - spread),
                    now + day + (n % 2_592_000) as i64 * 1000,
                ),
                (Expiry::Expired, _) => (
                    None,
                    Some(result_json(n)),
                    Some(now - 8 * day),
                    now - 60_000 - spread,
                ),
            };
            insert.execute(idempotent_tools::store::sqlite::rusqlite::params![
                key.digest().as_slice(),
                key.as_str(),
                TOOL,
                [0u8; 16].as_slice(),
                if held { "held" } else { "done" },
                owner,
                lease,
                result,
                completed,
                expires,
            ])?;
        }
    }
    tx.commit()?;
    conn.execute_batch("ANALYZE; PRAGMA wal_checkpoint(TRUNCATE);")
}
