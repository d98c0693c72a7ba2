//! The SQLite store: durable claims in one file, shared by several
//! processes on one host.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use deadpool::unmanaged::Pool;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use tokio::sync::watch;

use super::row::{self, Backoff, Row, RowState, Verdict};
use super::schema::{self, SCHEMA_VERSION};
use super::{
    Claim, ClaimAnswer, ClaimRequest, Forget, Record, RecordCount, RecordPage, RecordQuery,
    RecordState, Store, StoreError, StoreFuture, StoreResult, Wait,
};
use crate::key::Key;
use crate::record::{Finished, Recorded};
use crate::tool::ToolId;

/// The rusqlite crate this store is built on, for applications that want to
/// look at the file themselves with a matching version.
pub use rusqlite;

/// The schema [`SqliteStore::open`] applies, at [`SCHEMA_VERSION`], for
/// reading or applying by hand.
pub const SQLITE_SCHEMA: &str =
    concat!(include_str!("sqlite/v1.sql"), include_str!("sqlite/v2.sql"));

/// The script of each schema version, in order: a file at version `n` gets
/// the scripts after the `n`th.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] =
    [include_str!("sqlite/v1.sql"), include_str!("sqlite/v2.sql")];

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

const RENEW: &str = "UPDATE idempotent_claims \
     SET lease_until = ?4 + ?5, expires_at = ?4 + ?5 + ?6 \
     WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

const HELD_BY: &str = "SELECT lease_until FROM idempotent_claims \
     WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

const PURGE: &str = "DELETE FROM idempotent_claims WHERE rowid IN ( \
       SELECT rowid FROM idempotent_claims \
       WHERE expires_at <= ?1 AND (state = 'done' OR lease_until <= ?1) \
       LIMIT ?2)";

/// Removes a finished record or a claim whose lease ran out, or anything
/// when `?3` (forced). `?2` is now.
const FORGET: &str = "DELETE FROM idempotent_claims \
     WHERE key_digest = ?1 AND (state = 'done' OR lease_until <= ?2 OR ?3)";

/// Whether a held claim is left under a key that a forget did not remove.
const HELD: &str = "SELECT 1 FROM idempotent_claims WHERE key_digest = ?1 AND state = 'held'";

/// The columns an operator reads, in the order [`read_record`] takes them.
macro_rules! record_columns {
    () => {
        "key_text, tool, state, owner, fence, taken_over, lease_until, ending, result, \
         finished_at, expires_at"
    };
}

/// One page of records. `?1`/`?2` the state and ending, `?3` the tool, `?4`
/// the run (a prefix of the key), `?5` the latest change time to match,
/// `?6` the key to start after, `?7` the rows to return; a `NULL` matches
/// anything.
const LIST: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM idempotent_claims \
     WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR ending = ?2) \
       AND (?3 IS NULL OR tool = ?3) \
       AND (?4 IS NULL OR substr(key_text, 1, length(?4)) = ?4) \
       AND (?5 IS NULL OR COALESCE(finished_at, lease_until) < ?5) \
       AND (?6 IS NULL OR key_text > ?6) \
     ORDER BY key_text LIMIT ?7"
);

const INSPECT: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM idempotent_claims WHERE key_digest = ?1"
);

const COUNT: &str = "SELECT tool, state, ending, count(*) FROM idempotent_claims \
     GROUP BY tool, state, ending";

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
    create: bool,
}

impl SqliteStoreBuilder {
    /// Whether [`open`](SqliteStoreBuilder::open) may create the file and
    /// its schema (the default). With `false` it opens only a file that
    /// holds the schema already, and fails with
    /// [`StoreError::MissingSchema`] otherwise: for tools that inspect an
    /// application's store and must never create one by mistake. An older
    /// schema is still upgraded in place.
    pub fn create(mut self, create: bool) -> SqliteStoreBuilder {
        self.create = create;
        self
    }

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

    /// Opens (or creates) the file, switches it to WAL, and brings its
    /// schema to [`SCHEMA_VERSION`]: it creates a missing schema and
    /// upgrades an older one in place, in one transaction. A schema newer
    /// than this build is refused with [`StoreError::SchemaTooNew`]. This
    /// does blocking file I/O: call it at start-up, or from
    /// `spawn_blocking`.
    pub fn open(self) -> StoreResult<SqliteStore> {
        let mut connections = Vec::with_capacity(self.connections);
        for _ in 0..self.connections {
            connections.push(connect(&self.path, self.busy_timeout, self.create)?);
        }
        if let Some(first) = connections.first_mut() {
            migrate(first, self.create)?;
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

/// The schema version of the file: the newest recorded, 1 for a claims
/// table that predates versions, 0 for none.
pub(crate) fn schema_version(conn: &Connection) -> rusqlite::Result<u32> {
    let has = |table: &str| -> rusqlite::Result<bool> {
        conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    if has("idempotent_schema")? {
        let newest: i64 = conn.query_row(
            "SELECT COALESCE(MAX(version), 1) FROM idempotent_schema",
            [],
            |r| r.get(0),
        )?;
        return Ok(u32::try_from(newest).unwrap_or(u32::MAX));
    }
    Ok(u32::from(has("idempotent_claims")?))
}

/// Brings the file's schema to [`SCHEMA_VERSION`] in one transaction, which
/// takes the write lock first, so processes opening one file at once apply
/// each script once.
fn migrate(conn: &mut Connection, create: bool) -> StoreResult<()> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(store_error)?;
    let found = schema_version(&tx).map_err(store_error)?;
    for script in schema::upgrades(&MIGRATIONS, found, create)? {
        tx.execute_batch(script).map_err(store_error)?;
    }
    tx.commit().map_err(store_error)
}

fn connect(path: &Path, busy_timeout: Duration, create: bool) -> StoreResult<Connection> {
    let conn = if create {
        Connection::open(path)
    } else {
        Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    }
    .map_err(store_error)?;
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
            create: true,
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

    async fn claim(self: &Arc<Self>, req: ClaimRequest<'_>) -> StoreResult<ClaimAnswer> {
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
            return Ok(ClaimAnswer::Claimed(Claim {
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
            } => Ok(ClaimAnswer::InFlight(wait_on(
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

    async fn renew(self: &Arc<Self>, claim: &Claim, lease: Duration) -> StoreResult<()> {
        let digest = claim.key.digest();
        let (owner, fence) = (claim.owner, claim.fence);
        let lease = row::millis(lease);
        let retention = row::millis(claim.retention);
        let changed = self
            .run(move |_, conn| {
                conn.prepare_cached(RENEW)?.execute(params![
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

    async fn forget(self: &Arc<Self>, key: &Key, how: Forget) -> StoreResult<bool> {
        let digest = key.digest();
        let force = how == Forget::Force;
        let (deleted, live) = self
            .run(move |inner, conn| {
                let deleted = conn.prepare_cached(FORGET)?.execute(params![
                    digest.as_slice(),
                    now_millis(),
                    force
                ])?;
                if deleted > 0 {
                    // A forced claim's waiters in this process look again.
                    inner.settle();
                    return Ok((true, false));
                }
                let live = conn
                    .prepare_cached(HELD)?
                    .exists(params![digest.as_slice()])?;
                Ok((false, live))
            })
            .await?;
        if live {
            return Err(StoreError::LiveClaim {
                key: key.as_str().to_owned(),
            });
        }
        Ok(deleted)
    }

    async fn list(self: &Arc<Self>, query: &RecordQuery) -> StoreResult<RecordPage> {
        let (state, ending) = query.state.map(RecordState::columns).unzip();
        let ending = ending.flatten();
        let tool = query.tool.clone();
        let run = query.run.clone();
        let before = query
            .older_than
            .map(|age| now_millis().saturating_sub(row::millis(age)));
        let after = query.after.clone();
        let page = query.page_size();
        let limit = i64::try_from(page + 1).unwrap_or(i64::MAX);
        let raw = self
            .run(move |_, conn| {
                conn.prepare_cached(LIST)?
                    .query_map(
                        params![state, ending, tool, run, before, after, limit],
                        read_record,
                    )?
                    .collect::<rusqlite::Result<Vec<RawRecord>>>()
            })
            .await?;
        let records = raw
            .into_iter()
            .map(RawRecord::into_record)
            .collect::<StoreResult<Vec<Record>>>()?;
        Ok(RecordPage::from_overfetch(records, page))
    }

    async fn inspect(self: &Arc<Self>, key: &Key) -> StoreResult<Option<Record>> {
        let digest = key.digest();
        let raw = self
            .run(move |_, conn| {
                conn.prepare_cached(INSPECT)?
                    .query_row(params![digest.as_slice()], read_record)
                    .optional()
            })
            .await?;
        match raw {
            Some(raw) if raw.key_text != key.as_str() => Err(StoreError::Corrupt(format!(
                "key `{key}` shares its digest with the stored key `{}`",
                raw.key_text
            ))),
            Some(raw) => raw.into_record().map(Some),
            None => Ok(None),
        }
    }

    async fn count(self: &Arc<Self>) -> StoreResult<Vec<RecordCount>> {
        let rows = self
            .run(move |_, conn| {
                conn.prepare_cached(COUNT)?
                    .query_map([], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<String>>(2)?,
                            r.get::<_, i64>(3)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        let mut counts = rows
            .into_iter()
            .map(|(tool, state, ending, count)| {
                let state = row::record_state(&state, ending.as_deref())?;
                Ok(RecordCount::new(
                    ToolId::owned(tool),
                    state,
                    u64::try_from(count).unwrap_or(0),
                ))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        counts.sort_by(|a, b| (&a.tool, a.state).cmp(&(&b.tool, b.state)));
        Ok(counts)
    }
}

/// A record as SQLite returns it.
struct RawRecord {
    key_text: String,
    tool: String,
    state: String,
    owner: Vec<u8>,
    fence: i64,
    taken_over: bool,
    lease_until: Option<i64>,
    ending: Option<String>,
    result: Option<String>,
    finished_at: Option<i64>,
    expires_at: i64,
}

fn read_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRecord> {
    Ok(RawRecord {
        key_text: r.get(0)?,
        tool: r.get(1)?,
        state: r.get(2)?,
        owner: r.get(3)?,
        fence: r.get(4)?,
        taken_over: r.get::<_, i64>(5)? != 0,
        lease_until: r.get(6)?,
        ending: r.get(7)?,
        result: r.get(8)?,
        finished_at: r.get(9)?,
        expires_at: r.get(10)?,
    })
}

impl RawRecord {
    fn into_record(self) -> StoreResult<Record> {
        let state = row::record_state(&self.state, self.ending.as_deref())?;
        let held = state == RecordState::Held;
        Ok(Record {
            key: Key::from_recorded(&self.key_text),
            tool: ToolId::owned(self.tool),
            state,
            fence: row::fence_from(self.fence)?,
            taken_over: self.taken_over,
            owner: if held {
                Some(row::owner_from(&self.owner)?)
            } else {
                None
            },
            lease_until: self.lease_until.map(row::from_unix_millis),
            result: self.result.map(Recorded::from_json),
            finished_at: self.finished_at.map(row::from_unix_millis),
            expires_at: Some(row::from_unix_millis(self.expires_at)),
        })
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
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
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

    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.renew(claim, lease))
    }

    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        StoreFuture::boxed(self.inner.purge_expired())
    }

    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        StoreFuture::boxed(self.inner.forget(key, how))
    }

    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        StoreFuture::boxed(self.inner.list(query))
    }

    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        StoreFuture::boxed(self.inner.inspect(key))
    }

    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        StoreFuture::boxed(self.inner.count())
    }

    fn kind(&self) -> &'static str {
        "sqlite"
    }

    /// A third of the lease: two renewals may fail or come late before
    /// another process takes the claim over.
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        Some(lease / 3)
    }
}
