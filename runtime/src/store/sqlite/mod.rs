//! The SQLite store: durable claims in one file, shared by several
//! processes on one host.
//!
//! - `open`: the builder, the connections and their pragmas, the schema;
//! - `sql`: the statements, as SQL;
//! - `steps`: each step of a claim, on the writer or the blocking pool;
//! - `writer`: the thread that runs the writes, coalesced;
//! - `rows`: reading rows back;
//! - `transaction`: a call whose completion commits in the action's own
//!   transaction;
//! - `error`: SQLite's errors, sorted.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

mod error;
mod open;
mod rows;
mod sql;
mod steps;
mod transaction;
mod writer;

pub use open::SqliteStoreBuilder;

#[cfg(doc)]
use super::StoreError;
use super::StoreResult;
use super::durable::Durable;
#[cfg(doc)]
use super::schema::SCHEMA_VERSION;

/// The rusqlite crate this store is built on, for applications that want to
/// look at the file themselves with a matching version.
pub use rusqlite;

/// The schema [`SqliteStore::open`] applies, at [`SCHEMA_VERSION`], for
/// reading or applying by hand.
pub const SQLITE_SCHEMA: &str = concat!(
    include_str!("v1.sql"),
    include_str!("v2.sql"),
    include_str!("v3.sql")
);

/// How long a statement waits for another process's write lock before the
/// store reports it [contended](StoreError::Contended) (the guard then
/// tries a claim again for as long as the call may wait).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A waiter's first look at a claim held in another process.
pub const DEFAULT_POLL_FIRST: Duration = Duration::from_millis(2);

/// The longest a waiter sleeps between two looks.
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(100);

/// How many rows one purge statement deletes at most.
pub const DEFAULT_PURGE_BATCH: usize = 1000;

/// Claims and records in one SQLite file, for several processes on one host.
///
/// It needs no set-up beyond a path: [`SqliteStore::open`] creates the file
/// and its [schema](SQLITE_SCHEMA).
///
/// - **One writer, steps coalesced.** SQLite admits one writer at a time,
///   so claims, completions, releases and renewals all go to one writer
///   thread with a connection of its own. The steps waiting while a write
///   is in flight go together in the next: one `IMMEDIATE` transaction, a
///   `SAVEPOINT` per step (a step that fails rolls back alone, and only its
///   caller gets the error), one commit and so one flush for them all. A
///   step that finds nothing queued runs at once. A claim is one `INSERT ..
///   ON CONFLICT DO UPDATE .. RETURNING`: it inserts, takes over an expired
///   row, or leaves the row as it is, and returns the row in every case, so
///   the claim itself stays atomic; before it, a read of the completed row
///   answers a replay without writing (a transaction of replays alone
///   costs no flush). Completion, release and renewal are one statement
///   each. A claim whose caller is gone is not made, or is let go.
/// - **Several processes.** The file is in WAL mode with a busy timeout, so
///   processes read while one writes and queue for the write lock. No
///   statement runs on the async runtime: waiters' looks, purges and the
///   operator's reads run on tokio's blocking pool with a pool of
///   connections of their own.
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
/// use idempotent_tools::call::{Call, Key};
/// use idempotent_tools::SqliteStore;
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
    inner: Arc<steps::Inner>,
}

impl SqliteStore {
    /// Opens (or creates) a store at `path` with the default settings. See
    /// [`SqliteStoreBuilder::open`].
    ///
    /// # Errors
    ///
    /// As [`SqliteStoreBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        SqliteStore::builder(path).open()
    }

    /// Starts a store with settings other than the defaults.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(path.as_ref())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many steps this store has run: one per claim, completion,
    /// release, renewal and wait poll, one per purge batch. A claim runs a
    /// read, and the upsert only when the read found no completed record.
    /// For measuring, and for tests that count steps.
    pub fn statements(&self) -> u64 {
        self.inner.statements.load(Ordering::Relaxed)
    }

    /// How many transactions the writer has run: claims, completions,
    /// releases and renewals that waited together share one, and a step
    /// that found nothing queued is one alone. For measuring how well steps
    /// coalesce.
    pub fn transactions(&self) -> u64 {
        self.inner.writer.commits()
    }
}

impl Durable for SqliteStore {
    type Backend = steps::Inner;

    fn backend(&self) -> &Arc<steps::Inner> {
        &self.inner
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}
