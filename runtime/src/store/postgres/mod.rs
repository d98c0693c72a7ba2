//! The Postgres store: durable claims shared by processes on several hosts.
//!
//! - `builder`: where connections come from, listening, settings;
//! - `connect`: the store's own pool and listening session, made;
//! - `schema`: the schema's versions and migration;
//! - `sql`: the statements, as SQL;
//! - here: the store's state, shared by the files below, and the one loop
//!   that sends a statement, again on another connection if its own broke;
//! - `steps`: each step of a claim, one statement each;
//! - `batch`: claims and completions coalesced into one statement;
//! - `transaction`: a call whose completion commits in the action's own
//!   transaction;
//! - `rows`: reading rows back;
//! - `wait` and `listener`: waking waiters through `LISTEN`, or polling;
//! - `error`: errors sorted, naming statement and SQLSTATE.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::TryStreamExt;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

mod batch;
mod builder;
mod connect;
mod error;
mod listener;
mod rows;
mod schema;
mod sql;
mod steps;
mod transaction;
mod wait;

pub use transaction::Scope;

pub use builder::PostgresStoreBuilder;
pub use schema::POSTGRES_SCHEMA;

use super::durable::Durable;
use super::durable::reconnect::Reconnecting;
#[cfg(doc)]
use super::schema::SCHEMA_VERSION;
use super::{StoreError, StoreResult};
use batch::Batches;
use error::Broken;
use listener::Listener;
use sql::Statement;

/// The deadpool-postgres crate this store is built on, to build a pool of
/// the matching version for [`PostgresStoreBuilder::from_pool`].
pub use deadpool_postgres;
/// The tokio-postgres crate this store is built on.
pub use tokio_postgres;

/// The channel completions and releases notify, with the key digest in hex,
/// when a waiter has marked the key's row. The store binds it into its
/// statements and listens on it.
pub const NOTIFY_CHANNEL: &str = "idempotent_claims";

/// The `application_name` of the listening connection, unless its config
/// names one.
pub const LISTENER_NAME: &str = "idempotent listener";

/// How many rows one purge statement deletes at most.
pub const DEFAULT_PURGE_BATCH: usize = 1000;

/// The most claims (or completions) one coalesced statement carries, unless
/// [`PostgresStoreBuilder::coalesce_batch`] says otherwise.
pub const DEFAULT_COALESCE_BATCH: usize = 64;

/// The most a waiter sleeps before it looks at the claim again even though
/// no notification came: a bound on how long a lost notification (say, the
/// listening connection dropped) can delay it.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// Claims and records in Postgres, for processes on several hosts.
///
/// - **Set-up.** [`PostgresStore::connect`] with a URL, or a
///   [`PostgresStoreBuilder`] for the application's own deadpool-postgres
///   pool, TLS, or other settings. The schema is created by an explicit
///   [`PostgresStore::migrate`], or by a DBA from [`POSTGRES_SCHEMA`].
/// - **One round trip per step.** A claim is one statement: a CTE that
///   reads the key's row, takes it over if it may, or inserts with `ON
///   CONFLICT DO NOTHING`, and returns what it did or found. A fresh claim,
///   a replay, a conflict and finding a claim in flight each take one round
///   trip; a replay writes nothing. A claim that loses the race for a
///   brand-new key to a concurrent insert takes one more. Completion,
///   release and renewal take one each. Statements are prepared once per
///   pooled connection.
/// - **Coalesced under load.** Claims (replays' reads among them) and
///   completions that arrive while earlier ones are on the wire go together
///   in one statement over arrays, one commit for many, each caller still
///   getting its own answer; one that arrives alone goes at once. See
///   [`PostgresStoreBuilder::coalesce`].
/// - **Leases and fences.** A claim carries a random owner token, a fence
///   and a lease measured by the database's clock. The guard renews the
///   lease while the action runs; if the holder's process or host dies, the
///   lease runs out and the next caller takes the claim over, bumping the
///   fence. The dead holder's completion, should it ever come, changes
///   nothing and gets [`StoreError::LeaseLost`].
/// - **Waiting.** The store keeps one connection that `LISTEN`s on the
///   [`NOTIFY_CHANNEL`] and wakes the waiters of a key. A waiter subscribes
///   before its claim statement runs, then marks the held row; completions
///   and releases `NOTIFY` only a marked row, so calls nobody waits for
///   commit without the notification queue's database-wide lock. A
///   completion after the mark is never missed; a waiter also looks again
///   when the holder's lease would run out, and at least every
///   [`RECHECK_EVERY`].
/// - **Restarts and failovers.** A statement whose connection broke (the
///   server restarted or shut down, an administrator ended the session, the
///   network dropped it) runs again on another connection from the pool,
///   pacing itself, for up to
///   [`reconnect_within`](PostgresStoreBuilder::reconnect_within). Trying
///   again never acts twice: a claim whose reply was lost finds the row its
///   own by its owner token, and the other steps are fenced. A server still
///   away when the budget runs out is reported
///   [unavailable](StoreError::Unavailable). A statement that gave way to
///   another writer (a lock timeout, a serialization failure, a deadlock)
///   changed nothing and is reported [contended](StoreError::Contended):
///   the guard tries a claim again for as long as the call may wait, so an
///   operator's lock held past the role's `lock_timeout` delays calls
///   rather than failing them.
///
/// Compiled here, not run: the test suite runs the same steps against a real
/// server.
///
/// ```no_run
/// use std::sync::Arc;
/// use idempotent_tools::PostgresStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::store::StoreError> {
/// let url = "postgres://app@db.internal/app";
/// let store = Arc::new(PostgresStore::connect(url).await?);
/// store.migrate().await?;
/// idempotent_tools::set_default_store(store);
/// # Ok(()) }
/// ```
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl PostgresStore {
    /// Connects to the database at `url` (such as
    /// `postgres://app@db.internal/app`), without TLS, with a pool of up to
    /// 16 connections and one more that listens for completions: the
    /// one-line shortcut for `PostgresStore::builder(url).connect()`.
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`]: [`StoreError::Unavailable`]
    /// if the server cannot be reached.
    pub async fn connect(url: &str) -> StoreResult<PostgresStore> {
        PostgresStore::builder(url).connect().await
    }

    /// Starts a store on the database at `url` with settings other than
    /// the defaults.
    pub fn builder(url: &str) -> PostgresStoreBuilder {
        PostgresStoreBuilder::from_url(url)
    }

    /// Waits until the store listens for completions, connecting its
    /// listener if need be: for a readiness check at start-up. `false` if
    /// the store has no listener or it cannot connect; waiters then poll.
    pub async fn listening(&self) -> bool {
        match &self.inner.listener {
            Some(listener) => listener.up().await,
            None => false,
        }
    }

    /// The pool the store runs its statements on.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// How many statements this store has sent: one per claim, completion,
    /// release, renewal and wait recheck (one per coalesced batch of claims
    /// or completions), one per purge batch (preparing a
    /// statement, once per connection, is not counted). For measuring, and
    /// for tests that count round trips.
    pub fn statements(&self) -> u64 {
        self.inner.statements.load(Ordering::Relaxed)
    }

    /// How many claims and completions wait for a batch to go out (see
    /// [`PostgresStoreBuilder::coalesce`]): zero unless every batch slot
    /// is on the wire. For measuring, and for tests that hold a batch.
    pub fn waiting(&self) -> usize {
        self.inner.batches.as_ref().map_or(0, |batches| {
            batches.claims.waiting() + batches.completions.waiting()
        })
    }
}

impl Durable for PostgresStore {
    type Backend = Inner;

    fn backend(&self) -> &Arc<Inner> {
        &self.inner
    }
}

/// A Postgres store's state, shared with its waiters, its batches and its
/// steps.
pub struct Inner {
    pool: Pool,
    listener: Option<Arc<Listener>>,
    statements: AtomicU64,
    purge_batch: usize,
    asynchronous_completions: bool,
    reconnect_within: Duration,
    /// The schema every connection's `search_path` names, if one was set.
    schema: Option<String>,
    /// The coalescers of claims and completions; `None` when every step
    /// goes alone.
    batches: Option<Batches>,
    /// This state itself, for the batches' tasks.
    me: Weak<Inner>,
}

impl Inner {
    /// Runs one prepared statement and returns its rows. A statement whose
    /// connection broke runs again on another, while the store's
    /// `reconnect_within` lasts.
    async fn query(
        &self,
        statement: Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        self.query_answered(statement, params)
            .await
            .map_err(|(error, _)| error)
    }

    /// [`Inner::query`], saying on failure whether the server answered
    /// (refused the statement) or was never reached.
    async fn query_answered(
        &self,
        statement: Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, (StoreError, bool)> {
        self.send(statement, params).await.map(|(rows, _)| rows)
    }

    /// Runs one prepared statement and returns how many rows it touched,
    /// trying again on another connection as [`Inner::query`] does.
    async fn execute(
        &self,
        statement: Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<u64> {
        self.send(statement, params)
            .await
            .map(|(_, changed)| changed)
            .map_err(|(error, _)| error)
    }

    /// Sends one prepared statement on a connection of the pool and returns
    /// its rows and how many rows it touched: again on another connection
    /// if this one broke, while the store's `reconnect_within` lasts. On
    /// failure, says whether the server answered (refused the statement)
    /// or was never reached.
    async fn send(
        &self,
        statement: Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(Vec<Row>, u64), (StoreError, bool)> {
        let mut reconnecting = Reconnecting::new(self.reconnect_within);
        loop {
            let tried = async {
                let client = self.pool.get().await.map_err(Broken::pool)?;
                let prepared = client.prepare_cached(statement.sql).await?;
                self.statements.fetch_add(1, Ordering::Relaxed);
                let stream = client.query_raw(&prepared, params.iter().copied()).await?;
                let mut stream = std::pin::pin!(stream);
                let mut rows = Vec::new();
                while let Some(row) = stream.try_next().await? {
                    rows.push(row);
                }
                let changed = stream.rows_affected().unwrap_or(0);
                Ok::<_, Broken>((rows, changed))
            };
            match tried.await {
                Ok(answer) => return Ok(answer),
                Err(broken) if broken.is_broken() && reconnecting.again().await => {}
                Err(broken) => {
                    let answered = broken.answered();
                    return Err((broken.into_store_error(statement.name), answered));
                }
            }
        }
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.inner.pool.status())
            .field("listens", &self.inner.listener.is_some())
            .finish_non_exhaustive()
    }
}
