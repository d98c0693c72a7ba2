//! The SQLite store: durable claims in one file, shared by several
//! processes on one host.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use deadpool::unmanaged::Pool;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::watch;

use super::row::{self, Backoff, Row, RowState, Verdict};
use super::{Claim, ClaimRequest, ClaimState, Store, StoreError, StoreFuture, StoreResult, Wait};
use crate::key::Key;
use crate::record::Finished;

/// The rusqlite crate this store is built on, for applications that want to
/// look at the file themselves with a matching version.
pub use rusqlite;

/// The schema [`SqliteStore::open`] applies, for reading or applying by hand.
pub const SQLITE_SCHEMA: &str = include_str!("sqlite/schema.sql");

/// How long a statement waits for another process's write lock before the
/// store reports itself [unavailable](StoreError::Unavailable).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A waiter's first look at a claim held in another process.
pub const DEFAULT_POLL_FIRST: Duration = Duration::from_millis(2);

/// The longest a waiter sleeps between two looks.
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(100);

/// How many rows one purge statement deletes at most.
pub const DEFAULT_PURGE_BATCH: usize = 1000;

// The condition under which a claim may replace the row it collides with:
// a held claim whose lease ran out, for the same tool and arguments (a
// takeover), or a finished record past its retention. `?6` is now.
macro_rules! takeable {
    () => {
        "((state = 'held' AND lease_until <= ?6 \
           AND tool = excluded.tool AND fingerprint = excluded.fingerprint) \
          OR (state = 'done' AND expires_at <= ?6))"
    };
}

// For every column, the new value if the row may be taken, else the old one.
macro_rules! take {
    ($col:literal, $new:literal) => {
        concat!(
            $col,
            " = CASE WHEN ",
            takeable!(),
            " THEN ",
            $new,
            " ELSE ",
            $col,
            " END"
        )
    };
}

/// One statement: insert a claim; on a collision, take the row over if it
/// may be taken and leave it as it is otherwise; return the row either way.
/// The caller holds the claim exactly when the returned owner is its own.
const CLAIM: &str = concat!(
    "INSERT INTO idempotent_claims \
       (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over, lease_until, expires_at) \
     VALUES (?1, ?2, ?3, ?4, 'held', ?5, 1, 0, ?6 + ?7, ?6 + ?7 + ?8) \
     ON CONFLICT (key_digest) DO UPDATE SET ",
    take!("taken_over", "state = 'held'"),
    ", ",
    take!("fence", "fence + 1"),
    ", ",
    take!("key_text", "excluded.key_text"),
    ", ",
    take!("tool", "excluded.tool"),
    ", ",
    take!("fingerprint", "excluded.fingerprint"),
    ", ",
    take!("state", "'held'"),
    ", ",
    take!("owner", "excluded.owner"),
    ", ",
    take!("lease_until", "excluded.lease_until"),
    ", ",
    take!("ending", "NULL"),
    ", ",
    take!("result", "NULL"),
    ", ",
    take!("finished_at", "NULL"),
    ", ",
    take!("expires_at", "excluded.expires_at"),
    " RETURNING key_text, tool, fingerprint, state, owner, fence, taken_over, \
       lease_until, ending, result, finished_at"
);

/// A replay's read: the finished, unexpired row for a key, if there is one.
const PEEK_FINISHED: &str = "SELECT key_text, tool, fingerprint, state, owner, fence, taken_over, \
       lease_until, ending, result, finished_at \
     FROM idempotent_claims WHERE key_digest = ?1 AND state = 'done' AND expires_at > ?2";

/// Completes a claim held by this owner at this fence. Completing it again
/// (a retry after a reply that was lost) finds it done by the same owner and
/// fence and writes the same record: nobody else can hold that pair.
const COMPLETE: &str = "UPDATE idempotent_claims \
     SET state = 'done', ending = ?4, result = ?5, finished_at = ?6, lease_until = NULL, \
         expires_at = ?7 + ?8 \
     WHERE key_digest = ?1 AND owner = ?2 AND fence = ?3";

const RELEASE: &str = "DELETE FROM idempotent_claims \
     WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

const EXTEND: &str = "UPDATE idempotent_claims \
     SET lease_until = ?4 + ?5, expires_at = ?4 + ?5 + ?6 \
     WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

const HELD_BY: &str = "SELECT lease_until FROM idempotent_claims \
     WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

const PURGE: &str = "DELETE FROM idempotent_claims WHERE rowid IN ( \
       SELECT rowid FROM idempotent_claims \
       WHERE expires_at <= ?1 AND (state = 'done' OR lease_until <= ?1) \
       LIMIT ?2)";

const FORGET: &str = "DELETE FROM idempotent_claims WHERE key_digest = ?1 AND state = 'done'";

/// Claims and records in one SQLite file, for several processes on one host.
///
/// It needs no set-up beyond a path: [`SqliteStore::open`] creates the file
/// and its [schema](SQLITE_SCHEMA).
///
/// - **One trip per step.** A claim is one trip to SQLite. A replay is
///   answered by a read of the finished row, which takes no write lock and
///   costs no disk sync. Otherwise the claim is one `INSERT .. ON CONFLICT
///   DO UPDATE .. RETURNING`: it inserts, takes over an expired row, or
///   leaves the row as it is, and returns the row in every case, so the
///   claim itself stays atomic. Completion, release and renewal are one
///   statement each.
/// - **Several processes.** The file is in WAL mode with a busy timeout, so
///   processes read while one writes and queue for the write lock. Every
///   statement runs on tokio's blocking pool, never on the async runtime.
/// - **Leases.** A claim carries a random owner token, a fence and a lease.
///   The guard renews the lease while the action runs; if the holder's
///   process dies, the lease runs out and the next caller takes the claim
///   over, bumping the fence. The dead holder's completion, should it ever
///   come, changes nothing and gets [`StoreError::LeaseLost`].
/// - **Waiting.** A duplicate in the same process is woken the moment the
///   claim is completed or released. A duplicate in another process polls
///   with backoff: it looks after 2 ms, then doubles the pause up to 100 ms,
///   and looks right after the holder's lease would run out. Each look is
///   one read, which under WAL never blocks the writer. The guard's wait
///   deadline bounds it all.
/// - **Durability.** `synchronous = FULL`: a completion is on disk before
///   the caller hears of it, so a power cut never forgets an action that
///   happened.
///
/// ```
/// use std::sync::Arc;
/// use idempotent_tools::{Call, Key};
/// use idempotent_tools::store::SqliteStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("idempotent-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let store = Arc::new(SqliteStore::open(dir.join("claims.db"))?);
/// let key = Key::builder().literal("run-1:refund:")?.part("order_id", "1182")?.finish()?;
/// let refund = || async { Ok::<_, idempotent_tools::Error>("re_1".to_string()) };
///
/// let first = Call::new("shop::refund", key.clone()).store(&store).run(refund()).await?;
/// let again = Call::new("shop::refund", key).store(&store).run(refund()).await?;
/// assert!(first.is_fresh());
/// assert!(again.is_replay());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool<Connection>,
    path: PathBuf,
    statements: AtomicU64,
    /// Bumped whenever this store completes or releases a claim, so waiters
    /// in this process look again at once instead of at their next poll.
    settled: watch::Sender<u64>,
    poll_first: Duration,
    poll_max: Duration,
    purge_batch: usize,
}

/// Settings for a [`SqliteStore`]; every one has a default.
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools::store::SqliteStore;
///
/// # fn main() -> Result<(), idempotent_tools::StoreError> {
/// # let path = std::env::temp_dir().join(format!("idempotent-doc-b-{}.db", std::process::id()));
/// let store = SqliteStore::builder(&path)
///     .connections(2)
///     .busy_timeout(Duration::from_secs(2))
///     .open()?;
/// # drop(store);
/// # for suffix in ["", "-wal", "-shm"] {
/// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
/// # }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `.open()`"]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    connections: usize,
    busy_timeout: Duration,
    poll_first: Duration,
    poll_max: Duration,
    purge_batch: usize,
}

impl SqliteStoreBuilder {
    /// How many connections this process keeps open (default 2, at least
    /// 1). SQLite lets one connection write at a time, so more connections
    /// mostly help waiters read while a claim writes.
    pub fn connections(mut self, connections: usize) -> SqliteStoreBuilder {
        self.connections = connections.max(1);
        self
    }

    /// How long a statement waits for the write lock held by another
    /// connection or process before the store reports itself unavailable
    /// (default [`DEFAULT_BUSY_TIMEOUT`]).
    pub fn busy_timeout(mut self, timeout: Duration) -> SqliteStoreBuilder {
        self.busy_timeout = timeout;
        self
    }

    /// How a waiter polls a claim held by another process: the first pause,
    /// doubled after each look up to `max` (defaults [`DEFAULT_POLL_FIRST`]
    /// and [`DEFAULT_POLL_MAX`]).
    pub fn poll_backoff(mut self, first: Duration, max: Duration) -> SqliteStoreBuilder {
        self.poll_first = first.max(Duration::from_millis(1));
        self.poll_max = max.max(self.poll_first);
        self
    }

    /// How many rows one purge statement deletes at most (default
    /// [`DEFAULT_PURGE_BATCH`]), so a large purge never holds the write lock
    /// for long.
    pub fn purge_batch(mut self, rows: usize) -> SqliteStoreBuilder {
        self.purge_batch = rows.max(1);
        self
    }

    /// Opens (or creates) the file, switches it to WAL and creates the
    /// schema if it is missing. This does blocking file I/O: call it at
    /// start-up, or from `spawn_blocking`.
    pub fn open(self) -> StoreResult<SqliteStore> {
        let mut connections = Vec::with_capacity(self.connections);
        for _ in 0..self.connections {
            connections.push(connect(&self.path, self.busy_timeout)?);
        }
        if let Some(first) = connections.first() {
            first.execute_batch(SQLITE_SCHEMA).map_err(store_error)?;
        }
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                pool: Pool::from(connections),
                path: self.path,
                statements: AtomicU64::new(0),
                settled: watch::Sender::new(0),
                poll_first: self.poll_first,
                poll_max: self.poll_max,
                purge_batch: self.purge_batch,
            }),
        })
    }
}

fn connect(path: &Path, busy_timeout: Duration) -> StoreResult<Connection> {
    let conn = Connection::open(path).map_err(store_error)?;
    conn.busy_timeout(busy_timeout).map_err(store_error)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(store_error)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend(
            format!(
                "{} could not be switched to WAL (journal mode is `{mode}`); \
                 several processes need WAL to share it",
                path.display()
            )
            .into(),
        ));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(store_error)?;
    Ok(conn)
}

/// Sorts SQLite's errors into "unreachable" (the action must not run, and a
/// retry later may work) and everything else.
fn store_error(err: rusqlite::Error) -> StoreError {
    let unavailable = matches!(
        err.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::ReadOnly
                | ErrorCode::DiskFull
                | ErrorCode::OutOfMemory
        )
    );
    if unavailable {
        StoreError::Unavailable(Box::new(err))
    } else {
        StoreError::Backend(Box::new(err))
    }
}

fn now_millis() -> i64 {
    row::unix_millis(SystemTime::now())
}

/// What a claim statement returned.
struct Returned {
    key_text: String,
    tool: String,
    fingerprint: Vec<u8>,
    state: String,
    owner: Vec<u8>,
    fence: i64,
    taken_over: bool,
    lease_until: Option<i64>,
    ending: Option<String>,
    result: Option<String>,
    finished_at: Option<i64>,
}

impl SqliteStore {
    /// Opens (or creates) a store at `path` with the default settings. See
    /// [`SqliteStoreBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        SqliteStore::builder(path).open()
    }

    /// Starts a store with settings other than the defaults.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.as_ref().to_path_buf(),
            connections: 2,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            poll_first: DEFAULT_POLL_FIRST,
            poll_max: DEFAULT_POLL_MAX,
            purge_batch: DEFAULT_PURGE_BATCH,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many trips this store has made to SQLite (each one unit of work
    /// on the blocking pool): one per claim, completion, release, renewal and
    /// wait poll, one per purge batch. A claim's trip runs a read, and the
    /// upsert only when the read found no finished record. For measuring, and
    /// for tests that count round trips.
    pub fn statements(&self) -> u64 {
        self.inner.statements.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Runs `work` with a pooled connection on the blocking pool.
    async fn run<T, F>(self: &Arc<Self>, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner, &Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self
            .pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        let inner = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            inner.statements.fetch_add(1, Ordering::Relaxed);
            work(&inner, &conn)
        })
        .await
        .map_err(|e| StoreError::Backend(Box::new(e)))?
        .map_err(store_error)
    }

    fn settle(&self) {
        self.settled.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The lease left on a claim if `owner` at `fence` still holds it.
    async fn held_by(
        self: &Arc<Self>,
        digest: [u8; 32],
        owner: u128,
        fence: u64,
    ) -> StoreResult<Option<Duration>> {
        let lease_until = self
            .run(move |_, conn| {
                conn.prepare_cached(HELD_BY)?
                    .query_row(
                        params![
                            digest.as_slice(),
                            row::owner_bytes(owner).as_slice(),
                            row::fence_to(fence)
                        ],
                        |r| r.get::<_, Option<i64>>(0),
                    )
                    .optional()
            })
            .await?
            .flatten();
        let now = now_millis();
        Ok(lease_until
            .filter(|until| *until > now)
            .map(|until| Duration::from_millis(until.abs_diff(now))))
    }

    async fn claim(self: &Arc<Self>, req: ClaimRequest<'_>) -> StoreResult<ClaimState> {
        let owner = row::new_owner()?;
        // Subscribed before the statement, so a completion in this process
        // after it is never missed.
        let settled = self.settled.subscribe();
        let digest = req.key.digest();
        let key_text = req.key.clone();
        let tool = req.tool.as_str().to_owned();
        let fingerprint = *req.fingerprint.as_bytes();
        let lease = row::millis(req.lease);
        let retention = row::millis(req.retention);
        let (returned, now) = self
            .run(move |_, conn| {
                let now = now_millis();
                let read = |r: &rusqlite::Row<'_>| {
                    Ok(Returned {
                        key_text: r.get(0)?,
                        tool: r.get(1)?,
                        fingerprint: r.get(2)?,
                        state: r.get(3)?,
                        owner: r.get(4)?,
                        fence: r.get(5)?,
                        taken_over: r.get::<_, i64>(6)? != 0,
                        lease_until: r.get(7)?,
                        ending: r.get(8)?,
                        result: r.get(9)?,
                        finished_at: r.get(10)?,
                    })
                };
                // A finished record stays finished until it expires, so a
                // read may answer a replay; it takes no write lock and costs
                // no disk sync. Anything else goes to the atomic claim.
                let finished = conn
                    .prepare_cached(PEEK_FINISHED)?
                    .query_row(params![digest.as_slice(), now], read)
                    .optional()?;
                let returned = match finished {
                    Some(finished) => finished,
                    None => conn.prepare_cached(CLAIM)?.query_row(
                        params![
                            digest.as_slice(),
                            key_text.as_str(),
                            tool,
                            fingerprint.as_slice(),
                            row::owner_bytes(owner).as_slice(),
                            now,
                            lease,
                            retention
                        ],
                        read,
                    )?,
                };
                Ok((returned, now))
            })
            .await?;

        let holder = row::owner_from(&returned.owner)?;
        let fence = row::fence_from(returned.fence)?;
        if holder == owner {
            return Ok(ClaimState::Claimed(Claim {
                key: req.key.clone(),
                owner,
                fence,
                taken_over: returned.taken_over,
                retention: req.retention,
            }));
        }
        let state = match returned.state.as_str() {
            "held" => {
                let until = returned.lease_until.unwrap_or(now);
                RowState::Held {
                    owner: holder,
                    fence,
                    lease_left: Duration::from_millis(u64::try_from(until - now).unwrap_or(0)),
                }
            }
            "done" => RowState::Done {
                ending: returned.ending.unwrap_or_default(),
                result: returned
                    .result
                    .ok_or_else(|| StoreError::Corrupt("a finished row without a result".into()))?,
                finished_at: row::from_unix_millis(returned.finished_at.unwrap_or(now)),
            },
            other => return Err(StoreError::Corrupt(format!("a row in state `{other}`"))),
        };
        let found = Row {
            key_text: returned.key_text,
            tool: returned.tool,
            fingerprint: returned.fingerprint,
            state,
        };
        match row::judge(&req, found)? {
            Verdict::Answer(state) => Ok(state),
            Verdict::InFlight {
                owner,
                fence,
                lease_left,
            } => Ok(ClaimState::InFlight(wait_on(
                Arc::clone(self),
                settled,
                digest,
                owner,
                fence,
                lease_left,
            ))),
        }
    }

    async fn complete(self: &Arc<Self>, claim: &Claim, finished: Finished) -> StoreResult<()> {
        let json = finished.value.to_json()?.into_owned();
        let digest = claim.key.digest();
        let (owner, fence) = (claim.owner, claim.fence);
        let retention = row::millis(claim.retention);
        let ending = finished.ending.as_str();
        let finished_at = row::unix_millis(finished.finished_at);
        let changed = self
            .run(move |inner, conn| {
                let changed = conn.prepare_cached(COMPLETE)?.execute(params![
                    digest.as_slice(),
                    row::owner_bytes(owner).as_slice(),
                    row::fence_to(fence),
                    ending,
                    json,
                    finished_at,
                    now_millis(),
                    retention
                ])?;
                if changed > 0 {
                    inner.settle();
                }
                Ok(changed)
            })
            .await?;
        if changed == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    async fn release(self: &Arc<Self>, claim: &Claim) -> StoreResult<()> {
        let digest = claim.key.digest();
        let (owner, fence) = (claim.owner, claim.fence);
        let changed = self
            .run(move |inner, conn| {
                let changed = conn.prepare_cached(RELEASE)?.execute(params![
                    digest.as_slice(),
                    row::owner_bytes(owner).as_slice(),
                    row::fence_to(fence)
                ])?;
                if changed > 0 {
                    inner.settle();
                }
                Ok(changed)
            })
            .await?;
        if changed == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    async fn extend(self: &Arc<Self>, claim: &Claim, lease: Duration) -> StoreResult<()> {
        let digest = claim.key.digest();
        let (owner, fence) = (claim.owner, claim.fence);
        let lease = row::millis(lease);
        let retention = row::millis(claim.retention);
        let changed = self
            .run(move |_, conn| {
                conn.prepare_cached(EXTEND)?.execute(params![
                    digest.as_slice(),
                    row::owner_bytes(owner).as_slice(),
                    row::fence_to(fence),
                    now_millis(),
                    lease,
                    retention
                ])
            })
            .await?;
        if changed == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    async fn purge_expired(self: &Arc<Self>) -> StoreResult<u64> {
        let batch = self.purge_batch;
        let limit = i64::try_from(batch).unwrap_or(i64::MAX);
        let mut total = 0u64;
        loop {
            // Each batch is its own statement and its own turn at the write
            // lock, so claims from other processes get in between.
            let deleted = self
                .run(move |_, conn| {
                    conn.prepare_cached(PURGE)?
                        .execute(params![now_millis(), limit])
                })
                .await?;
            total += deleted as u64;
            if deleted < batch {
                return Ok(total);
            }
        }
    }

    async fn forget(self: &Arc<Self>, key: &Key) -> StoreResult<bool> {
        let digest = key.digest();
        let deleted = self
            .run(move |_, conn| {
                conn.prepare_cached(FORGET)?
                    .execute(params![digest.as_slice()])
            })
            .await?;
        Ok(deleted > 0)
    }
}

/// Waits until a claim held elsewhere may have changed: woken at once by a
/// completion or release in this process, and otherwise by polling with
/// backoff, looking again just after the holder's lease would run out.
fn wait_on(
    inner: Arc<Inner>,
    mut settled: watch::Receiver<u64>,
    digest: [u8; 32],
    owner: u128,
    fence: u64,
    lease_left: Duration,
) -> Wait {
    Wait::new(async move {
        let mut backoff = Backoff::new(inner.poll_first, inner.poll_max);
        let mut lease_left = lease_left;
        loop {
            let nap = backoff.nap(lease_left);
            tokio::select! {
                // The sender lives in `inner`, which this future holds.
                _ = settled.changed() => {}
                () = tokio::time::sleep(nap) => {}
            }
            match inner.held_by(digest, owner, fence).await {
                Ok(Some(left)) => lease_left = left,
                // Finished, released, taken over, lease run out, or the store
                // failed: the caller claims again and finds out which.
                Ok(None) | Err(_) => return,
            }
        }
    })
}

impl Store for SqliteStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimState>> {
        StoreFuture::boxed(self.inner.claim(req))
    }

    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Finished,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.complete(claim, finished))
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.release(claim))
    }

    fn extend<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.extend(claim, lease))
    }

    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        StoreFuture::boxed(self.inner.purge_expired())
    }

    fn forget<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<bool>> {
        StoreFuture::boxed(self.inner.forget(key))
    }

    /// A third of the lease: two renewals may fail or come late before
    /// another process takes the claim over.
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        Some(lease / 3)
    }
}
