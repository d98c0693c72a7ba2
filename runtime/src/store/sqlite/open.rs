//! Opening a SQLite store: the builder, the connections and their pragmas,
//! and the schema.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use deadpool::unmanaged::Pool;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tokio::sync::watch;

use super::error::store_error;
use super::sql;
use super::steps::Inner;
use super::writer::Writer;
use super::{
    DEFAULT_BUSY_TIMEOUT, DEFAULT_POLL_FIRST, DEFAULT_POLL_MAX, DEFAULT_PURGE_BATCH, SqliteStore,
};
use crate::store::schema::{self, SCHEMA_VERSION};
use crate::store::{StoreError, StoreResult};

/// The script of each schema version, in order: a file at version `n` gets
/// the scripts after the `n`th.
pub(super) const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    include_str!("v1.sql"),
    include_str!("v2.sql"),
    include_str!("v3.sql"),
];

/// Settings for a [`SqliteStore`]; every one has a default.
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools::SqliteStore;
///
/// # fn main() -> Result<(), idempotent_tools::store::StoreError> {
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
    pub(super) fn new(path: &Path) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.to_path_buf(),
            connections: 2,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            poll_first: DEFAULT_POLL_FIRST,
            poll_max: DEFAULT_POLL_MAX,
            purge_batch: DEFAULT_PURGE_BATCH,
            create: true,
        }
    }

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
    ///
    /// # Errors
    ///
    /// [`StoreError::CannotOpen`] if the file cannot be opened or created,
    /// naming its path; [`StoreError::Contended`] if it is locked past the
    /// busy timeout; [`StoreError::MissingSchema`] or
    /// [`StoreError::SchemaTooNew`] as above, and [`StoreError::Backend`]
    /// if the file cannot be switched to WAL.
    pub fn open(self) -> StoreResult<SqliteStore> {
        let mut writing = connect(&self.path, self.busy_timeout, self.create)?;
        migrate(&mut writing, self.create)?;
        let mut connections = Vec::with_capacity(self.connections);
        for _ in 0..self.connections {
            connections.push(connect(&self.path, self.busy_timeout, self.create)?);
        }
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                writer: Writer::start(writing, &self.path)?,
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
fn schema_version(conn: &Connection) -> rusqlite::Result<u32> {
    let has = |table: &str| -> rusqlite::Result<bool> {
        conn.query_row(sql::HAS_TABLE, [table], |r| r.get::<_, i64>(0))
            .map(|n| n > 0)
    };
    if has("idempotent_schema")? {
        let newest: i64 = conn.query_row(sql::NEWEST_VERSION, [], |r| r.get(0))?;
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

/// One connection, in WAL mode with `synchronous = FULL`.
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
    .map_err(|cause| StoreError::CannotOpen {
        store: "SQLite",
        place: path.display().to_string(),
        cause: Box::new(cause),
    })?;
    conn.busy_timeout(busy_timeout).map_err(store_error)?;
    // Switching a new file to WAL takes an exclusive lock, and SQLite
    // answers busy at once, without its busy handler, to a process that
    // races another doing the same: wait for it as the busy timeout says.
    let mode: String = while_busy(busy_timeout, || {
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
    })
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

/// Runs `step` again while SQLite answers busy, for up to `timeout`, with
/// short pauses: for the steps SQLite's own busy handler does not cover.
fn while_busy<T>(
    timeout: Duration,
    mut step: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match step() {
            Err(err)
                if matches!(
                    err.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() + pause < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}
