//! The Postgres store: durable claims shared by processes on several hosts.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use deadpool_postgres::{Manager, Pool, PoolError, Runtime};
use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Config, NoTls, Socket};

use super::row::{self, Backoff, LEASE_MARGIN, Row, RowState, Verdict};
use super::schema::{self, SCHEMA_VERSION};
use super::{
    Claim, ClaimAnswer, ClaimRequest, Forget, Record, RecordCount, RecordPage, RecordQuery,
    RecordState, Store, StoreError, StoreFuture, StoreResult, Wait,
};
use crate::key::Key;
use crate::record::{Finished, Recorded};
use crate::tool::ToolId;

/// The deadpool-postgres crate this store is built on, to build a pool of
/// the matching version for [`PostgresStore::from_pool`].
pub use deadpool_postgres;
/// The tokio-postgres crate this store is built on.
pub use tokio_postgres;

/// The schema [`PostgresStore::migrate`] applies, at [`SCHEMA_VERSION`],
/// for a DBA to read or apply by hand.
pub const POSTGRES_SCHEMA: &str = concat!(
    include_str!("postgres/v1.sql"),
    include_str!("postgres/v2.sql")
);

/// The script of each schema version, in order: a database at version `n`
/// gets the scripts after the `n`th.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    include_str!("postgres/v1.sql"),
    include_str!("postgres/v2.sql"),
];

/// The schema version of the database (on the search path): the newest
/// recorded, 1 for a claims table that predates versions, 0 for none.
const SCHEMA_VERSION_OF: &str = "\
SELECT CASE
    WHEN to_regclass('idempotent_schema') IS NOT NULL THEN -1
    WHEN to_regclass('idempotent_claims') IS NOT NULL THEN 1
    ELSE 0
END::integer";

const NEWEST_VERSION: &str = "SELECT COALESCE(MAX(version), 1)::integer FROM idempotent_schema";

/// The channel completions and releases notify, with the key digest in hex,
/// when a waiter has marked the key's row.
pub const NOTIFY_CHANNEL: &str = "idempotent_claims";

/// The `application_name` of the listening connection, unless its config
/// names one.
pub const LISTENER_NAME: &str = "idempotent listener";

/// How many rows one purge statement deletes at most.
pub const DEFAULT_PURGE_BATCH: usize = 1000;

/// The most a waiter sleeps before it looks at the claim again even though
/// no notification came: a bound on how long a lost notification (say, the
/// listening connection dropped) can delay it.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// How often a waiter polls when it cannot listen (a store built from an
/// application's pool without [`PostgresStore::listen_with`]): first pause,
/// doubled up to the second.
const POLL: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(250));

/// How many times a claim is retried when it lost a race in a way that left
/// it nothing to read (see [`CLAIM`]).
const CLAIM_ATTEMPTS: usize = 8;

/// One statement, one round trip. It reads the row for the key; takes it
/// over if its lease ran out (for the same tool and arguments) or its record
/// expired; inserts a claim if there was no row; and returns either the
/// claim it made (`mine`) or the row it found.
///
/// Finding a row locks nothing and writes nothing: a replay, a conflict or
/// a claim in flight costs one read, without a WAL flush.
///
/// All parts share one snapshot (READ COMMITTED). If another caller inserted
/// the key after the snapshot was taken, the insert does nothing and there
/// was nothing to read: the statement returns no row. If the row changed
/// after the snapshot (taken over, purged), the takeover re-checks it as it
/// is now and does nothing, and the row read from the snapshot looks
/// takeable (`stale`). Either way the caller runs the statement again with a
/// new snapshot, and checks tool and fingerprint on what it gets.
const CLAIM: &str = "\
WITH existing AS (
    SELECT fence, taken_over, key_text, tool, fingerprint, state, owner,
           lease_until, ending, result, finished_at, expires_at
    FROM idempotent_claims
    WHERE key_digest = $1::bytea
),
taken AS (
    UPDATE idempotent_claims AS c SET
        key_text = $2::text,
        tool = $3::text,
        fingerprint = $4::bytea,
        state = 'held',
        owner = $5::bytea,
        fence = c.fence + 1,
        taken_over = (c.state = 'held'),
        waiting = false,
        lease_until = now() + $6::bigint * interval '1 millisecond',
        expires_at = now() + ($6::bigint + $7::bigint) * interval '1 millisecond',
        ending = NULL,
        result = NULL,
        finished_at = NULL
    WHERE c.key_digest = $1::bytea
      AND ((c.state = 'held' AND c.lease_until <= now()
            AND c.tool = $3::text AND c.fingerprint = $4::bytea)
           OR (c.state = 'done' AND c.expires_at <= now()))
    RETURNING c.fence, c.taken_over
),
inserted AS (
    INSERT INTO idempotent_claims
        (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
         lease_until, expires_at)
    SELECT $1::bytea, $2::text, $3::text, $4::bytea, 'held', $5::bytea, 1, false,
           now() + $6::bigint * interval '1 millisecond',
           now() + ($6::bigint + $7::bigint) * interval '1 millisecond'
    WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING fence, taken_over
),
mine AS (
    SELECT fence, taken_over FROM taken
    UNION ALL
    SELECT fence, taken_over FROM inserted
)
SELECT true AS mine, fence, taken_over,
       NULL::text AS key_text, NULL::text AS tool, NULL::bytea AS fingerprint,
       NULL::text AS state, NULL::bytea AS owner, NULL::bigint AS lease_left_ms,
       NULL::text AS ending, NULL::text AS result, NULL::timestamptz AS finished_at,
       false AS stale
FROM mine
UNION ALL
SELECT false, fence, taken_over, key_text, tool, fingerprint, state, owner,
       GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint,
       ending, result, finished_at,
       (state = 'done' AND expires_at <= now())
         OR (state = 'held' AND lease_until <= now()
             AND tool = $3::text AND fingerprint = $4::bytea)
FROM existing
WHERE NOT EXISTS (SELECT 1 FROM mine)";

/// Completes a claim held by this owner at this fence. Completing it again
/// (a retry after a reply that was lost) finds it done by the same owner and
/// fence and writes the same record: nobody else can hold that pair.
///
/// It notifies only if a waiter marked the row ([`MARK_WAITING`]): a
/// transaction that notifies holds a database-wide lock through its commit's
/// flush, so notifying every completion would stop completions from
/// committing together. One row comes back per row completed, notified or
/// not.
const COMPLETE: &str = "\
WITH done AS (
    UPDATE idempotent_claims
    SET state = 'done', ending = $4, result = $5, finished_at = $6, lease_until = NULL,
        expires_at = now() + $7::bigint * interval '1 millisecond'
    WHERE key_digest = $1 AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)
SELECT CASE WHEN waiting THEN pg_notify('idempotent_claims', encode(key_digest, 'hex')) END
FROM done";

/// [`COMPLETE`], committed without waiting for the WAL flush
/// ([`PostgresStore::asynchronous_completions`]).
const COMPLETE_ASYNC: &str = "\
WITH unflushed AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
done AS (
    UPDATE idempotent_claims
    SET state = 'done', ending = $4, result = $5, finished_at = $6, lease_until = NULL,
        expires_at = now() + $7::bigint * interval '1 millisecond'
    WHERE key_digest = $1 AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)
SELECT CASE WHEN waiting THEN pg_notify('idempotent_claims', encode(key_digest, 'hex')) END
FROM done, unflushed";

/// Releases a claim; notifies only a row a waiter marked, as [`COMPLETE`].
const RELEASE: &str = "\
WITH gone AS (
    DELETE FROM idempotent_claims
    WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)
SELECT CASE WHEN waiting THEN pg_notify('idempotent_claims', encode(key_digest, 'hex')) END
FROM gone";

/// A waiter that listens for the key says so on the held row, and reads how
/// long its lease has left. No row: the claim is no longer held by that
/// owner at that fence, and the waiter claims again at once.
const MARK_WAITING: &str = "\
UPDATE idempotent_claims SET waiting = true
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3 AND lease_until > now()
RETURNING GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint";

const RENEW: &str = "\
UPDATE idempotent_claims
SET lease_until = now() + $4::bigint * interval '1 millisecond',
    expires_at = now() + ($4::bigint + $5::bigint) * interval '1 millisecond'
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3";

const HELD_BY: &str = "\
SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint
FROM idempotent_claims
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3 AND lease_until > now()";

/// Locks the batch it deletes, skipping rows a claim is changing, and checks
/// the conditions again on the row as it is when deleted.
const PURGE: &str = "\
WITH batch AS (
    SELECT key_digest FROM idempotent_claims
    WHERE expires_at <= now() AND (state = 'done' OR lease_until <= now())
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotent_claims c USING batch
WHERE c.key_digest = batch.key_digest
  AND c.expires_at <= now() AND (c.state = 'done' OR c.lease_until <= now())";

/// Removes a finished record or a claim whose lease ran out, or anything
/// when `$2` (forced), waking the waiters of a removed claim. Says whether
/// it removed a row, and if not, whether a live claim is left.
const FORGET: &str = "\
WITH gone AS (
    DELETE FROM idempotent_claims
    WHERE key_digest = $1 AND (state = 'done' OR lease_until <= now() OR $2::boolean)
    RETURNING key_digest, state
),
woken AS (
    SELECT pg_notify('idempotent_claims', encode(key_digest, 'hex')) FROM gone
    WHERE state = 'held'
)
SELECT (SELECT count(*) FROM gone) AS forgotten,
       (SELECT count(*) FROM woken) AS woken,
       EXISTS (SELECT 1 FROM idempotent_claims WHERE key_digest = $1 AND state = 'held') AS held";

/// The columns an operator reads, in the order [`read_record`] takes them.
macro_rules! record_columns {
    () => {
        "key_text, tool, state, owner, fence, taken_over, lease_until, ending, result, \
         finished_at, expires_at"
    };
}

/// One page of records. `$1`/`$2` the state and ending, `$3` the tool, `$4`
/// the run (a prefix of the key), `$5` the age in milliseconds, `$6` the key
/// to start after, `$7` the rows to return; a `NULL` matches anything. Keys
/// sort byte by byte (`COLLATE \"C\"`), as in the other stores.
const LIST: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM idempotent_claims
WHERE ($1::text IS NULL OR state = $1::text) AND ($2::text IS NULL OR ending = $2::text)
  AND ($3::text IS NULL OR tool = $3::text)
  AND ($4::text IS NULL OR left(key_text, length($4::text)) = $4::text)
  AND ($5::bigint IS NULL
       OR COALESCE(finished_at, lease_until) < now() - $5::bigint * interval '1 millisecond')
  AND ($6::text IS NULL OR key_text COLLATE \"C\" > $6::text)
ORDER BY key_text COLLATE \"C\"
LIMIT $7::bigint"
);

const INSPECT: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM idempotent_claims WHERE key_digest = $1"
);

const COUNT: &str = "\
SELECT tool, state, ending, count(*) AS n FROM idempotent_claims GROUP BY tool, state, ending";

/// The name an error gives a statement; looked up only when one failed.
fn statement_name(sql: &str) -> &'static str {
    [
        (CLAIM, "claim"),
        (COMPLETE, "complete"),
        (COMPLETE_ASYNC, "complete"),
        (MARK_WAITING, "mark-waiting"),
        (RELEASE, "release"),
        (RENEW, "renew"),
        (HELD_BY, "held-by"),
        (PURGE, "purge"),
        (FORGET, "forget"),
        (LIST, "list"),
        (INSPECT, "inspect"),
        (COUNT, "count"),
    ]
    .into_iter()
    .find(|(text, _)| *text == sql)
    .map_or("store", |(_, name)| name)
}

const MIGRATE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('idempotent_claims')::bigint)";

/// Claims and records in Postgres, for processes on several hosts.
///
/// - **Set-up.** [`PostgresStore::connect`] with a URL, or
///   [`PostgresStore::from_pool`] with the application's own
///   deadpool-postgres pool. The schema is created by an explicit
///   [`PostgresStore::migrate`], or by a DBA from [`POSTGRES_SCHEMA`].
/// - **One round trip per step.** A claim is one statement: a CTE that
///   reads the key's row, takes it over if it may, or inserts with `ON
///   CONFLICT DO NOTHING`, and returns what it did or found. A fresh claim,
///   a replay, a conflict and finding a claim in flight each take one round
///   trip; a replay writes nothing. A claim that loses the race for a
///   brand-new key to a concurrent insert takes one more. Completion,
///   release and renewal take one each. Statements are prepared once per
///   pooled connection.
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
///
/// Compiled here, not run: the test suite runs the same steps against a real
/// server.
///
/// ```no_run
/// use std::sync::Arc;
/// use idempotent_tools::store::PostgresStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::StoreError> {
/// let url = "postgres://app@db.internal/app";
/// let store = Arc::new(PostgresStore::connect(url).await?);
/// store.migrate().await?;
/// idempotent_tools::set_default_store(store);
/// # Ok(()) }
/// ```
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    listener: Option<Arc<Listener>>,
    statements: AtomicU64,
    purge_batch: usize,
    asynchronous_completions: bool,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.inner.pool.status())
            .field("listens", &self.inner.listener.is_some())
            .finish_non_exhaustive()
    }
}

/// The table is missing: the schema was never applied.
#[derive(Debug, thiserror::Error)]
#[error(
    "the table `idempotent_claims` does not exist in this database (or not on the search_path): \
     call `PostgresStore::migrate()` once at start-up, or have a DBA apply `POSTGRES_SCHEMA`"
)]
struct MissingSchema(#[source] tokio_postgres::Error);

/// A row that does not read as the schema says.
fn corrupt(err: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(format!("a claim row could not be read: {err}"))
}

/// Sorts errors into "unreachable" (the action must not run, and a retry
/// later may work) and everything else, naming the statement that failed and
/// the server's SQLSTATE; the server's own message is the source.
fn pg_error(statement: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError + Copy {
    move |err| {
        let Some(db) = err.as_db_error() else {
            // I/O, a closed connection, a timeout: the server was not reached.
            return StoreError::Unavailable(Box::new(StatementFailed {
                statement,
                sqlstate: None,
                source: err,
            }));
        };
        let code = db.code().clone();
        let class = code.code().get(..2).unwrap_or_default().to_owned();
        if code == SqlState::UNDEFINED_TABLE {
            return StoreError::Backend(Box::new(MissingSchema(err)));
        }
        let failed = Box::new(StatementFailed {
            statement,
            sqlstate: Some(code.code().to_owned()),
            source: err,
        });
        if matches!(class.as_str(), "08" | "53" | "57") {
            // Connection exceptions, insufficient resources, operator
            // intervention (a shutdown, a cancelled statement).
            StoreError::Unavailable(failed)
        } else {
            StoreError::Backend(failed)
        }
    }
}

/// A statement that failed: which, and the server's SQLSTATE when it
/// answered.
#[derive(Debug, thiserror::Error)]
#[error(
    "the `{statement}` statement failed{}",
    sqlstate.as_deref().map(|code| format!(" with SQLSTATE {code}")).unwrap_or_default()
)]
struct StatementFailed {
    statement: &'static str,
    sqlstate: Option<String>,
    #[source]
    source: tokio_postgres::Error,
}

fn pool_error(err: PoolError) -> StoreError {
    match err {
        PoolError::Backend(err) => pg_error("connect")(err),
        other => StoreError::Unavailable(Box::new(other)),
    }
}

fn with_timeouts(mut config: Config) -> Config {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    config
}

fn pool_for(config: Config) -> StoreResult<Pool> {
    Pool::builder(Manager::new(config, NoTls))
        .max_size(16)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|e| StoreError::Backend(Box::new(e)))
}

impl PostgresStore {
    /// Connects to the database at `url` (such as
    /// `postgres://app@db.internal/app`), without TLS, with a pool of up to
    /// 16 connections and one more that listens for completions. Fails with
    /// [`StoreError::Unavailable`] if the server cannot be reached.
    ///
    /// For TLS, build a pool with a TLS connector and use
    /// [`PostgresStore::from_pool`] and [`PostgresStore::listen_with`].
    pub async fn connect(url: &str) -> StoreResult<PostgresStore> {
        let store = PostgresStore::connect_lazy(url)?;
        let client = store.inner.pool.get().await.map_err(pool_error)?;
        drop(client);
        if let Some(listener) = &store.inner.listener {
            listener.ensure();
        }
        Ok(store)
    }

    /// Like [`PostgresStore::connect`], but connects on first use: nothing
    /// is checked until a call claims a key.
    pub fn connect_lazy(url: &str) -> StoreResult<PostgresStore> {
        let config: Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| StoreError::Backend(Box::new(e)))?;
        PostgresStore::from_config(config)
    }

    /// A store with its own pool from a tokio-postgres `Config`, without
    /// TLS. Connects on first use.
    pub fn from_config(config: Config) -> StoreResult<PostgresStore> {
        let config = with_timeouts(config);
        let pool = pool_for(config.clone())?;
        Ok(PostgresStore::from_pool(pool).listen_with(config, NoTls))
    }

    /// A store on the application's own pool.
    ///
    /// A pool's connections cannot receive notifications, so without
    /// [`PostgresStore::listen_with`] a duplicate waiting on a claim held
    /// elsewhere polls (from 5 ms, doubling up to 250 ms) instead of being
    /// woken. Everything else is the same.
    ///
    /// ```no_run
    /// use idempotent_tools::store::PostgresStore;
    /// use idempotent_tools::store::postgres::{deadpool_postgres, tokio_postgres};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let url = "postgres://app@db.internal/app";
    /// let config: tokio_postgres::Config = url.parse()?;
    /// let manager = deadpool_postgres::Manager::new(config.clone(), tokio_postgres::NoTls);
    /// let pool = deadpool_postgres::Pool::builder(manager).max_size(8).build()?;
    /// let store = PostgresStore::from_pool(pool).listen_with(config, tokio_postgres::NoTls);
    /// store.migrate().await?;
    /// assert!(store.listening().await);
    /// # Ok(()) }
    /// ```
    pub fn from_pool(pool: Pool) -> PostgresStore {
        PostgresStore {
            inner: Arc::new(Inner {
                pool,
                listener: None,
                statements: AtomicU64::new(0),
                purge_batch: DEFAULT_PURGE_BATCH,
                asynchronous_completions: false,
            }),
        }
    }

    /// Wakes waiters through `LISTEN` on one extra connection made from
    /// `config` with `tls`, which must reach the same database as the pool.
    pub fn listen_with<T>(self, config: Config, tls: T) -> PostgresStore
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let mut config = with_timeouts(config);
        if config.get_application_name().is_none() {
            // So that a DBA can tell the listening connection apart.
            config.application_name(LISTENER_NAME);
        }
        let session: SessionFn = Box::new(move |listener, stop| {
            Box::pin(listen(listener, stop, config.clone(), tls.clone()))
        });
        self.with(|inner| inner.listener = Some(Listener::new(session)))
    }

    /// How many rows one purge statement deletes at most (default
    /// [`DEFAULT_PURGE_BATCH`]), so a large purge never holds many row locks
    /// for long.
    pub fn purge_batch(self, rows: usize) -> PostgresStore {
        self.with(|inner| inner.purge_batch = rows.max(1))
    }

    /// Commits completions without waiting for the server to flush them to
    /// disk (`synchronous_commit = off` for that one transaction; claims,
    /// releases and renewals stay synchronous). Off by default.
    ///
    /// A completion then costs about what a claim costs, so a fresh call
    /// commits at nearly one insert's rate instead of two. The trade-off: if
    /// the database server crashes (not merely the application) within a
    /// fraction of a second of a completion, that completion may be lost,
    /// while the action's claim stays. The key then reads as a claim whose
    /// holder vanished after acting, the same case as a holder that crashed
    /// between its action and its completion: once the lease runs out, the
    /// next caller takes it over and the [`Takeover`](crate::Takeover)
    /// policy decides whether the action runs again or the outcome is
    /// reported unknown. The result itself is never lost to a caller that
    /// saw it: the committing call returned it.
    ///
    /// ```no_run
    /// # use idempotent_tools::store::PostgresStore;
    /// # async fn demo() -> Result<(), idempotent_tools::StoreError> {
    /// let store = PostgresStore::connect("postgres://app@db.internal/app")
    ///     .await?
    ///     .asynchronous_completions(true);
    /// # Ok(()) }
    /// ```
    pub fn asynchronous_completions(self, on: bool) -> PostgresStore {
        self.with(|inner| inner.asynchronous_completions = on)
    }

    fn with(self, change: impl FnOnce(&mut Inner)) -> PostgresStore {
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            // Waits still running hold the old settings; this store gets
            // its own, on the same pool.
            Err(shared) => Inner {
                pool: shared.pool.clone(),
                listener: shared.listener.clone(),
                statements: AtomicU64::new(shared.statements.load(Ordering::Relaxed)),
                purge_batch: shared.purge_batch,
                asynchronous_completions: shared.asynchronous_completions,
            },
        };
        change(&mut inner);
        PostgresStore {
            inner: Arc::new(inner),
        }
    }

    /// Brings the schema to [`SCHEMA_VERSION`] ([`POSTGRES_SCHEMA`]): it
    /// creates a missing schema and upgrades an older one in place, in one
    /// transaction under an advisory lock, so that several processes
    /// starting at once do not trip over each other. A schema newer than
    /// this build is refused with [`StoreError::SchemaTooNew`], and nothing
    /// is changed.
    pub async fn migrate(&self) -> StoreResult<()> {
        self.upgrade(true).await
    }

    /// Checks that the database holds this library's schema, without
    /// creating it: [`StoreError::MissingSchema`] if it has none,
    /// [`StoreError::SchemaTooNew`] if it is newer than this build. An older
    /// schema is upgraded in place, as [`PostgresStore::migrate`] does. For
    /// tools that inspect an application's store and must never create one
    /// in the wrong database.
    pub async fn check_schema(&self) -> StoreResult<()> {
        self.upgrade(false).await
    }

    /// The schema version the database is at: 0 without the schema.
    pub async fn schema_version(&self) -> StoreResult<u32> {
        let client = self.inner.pool.get().await.map_err(pool_error)?;
        version_of(&client).await
    }

    async fn upgrade(&self, create: bool) -> StoreResult<()> {
        let mut client = self.inner.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(pg_error("migrate"))?;
        tx.batch_execute(MIGRATE_LOCK)
            .await
            .map_err(pg_error("migrate"))?;
        let found = version_of(&tx).await?;
        for script in schema::upgrades(&MIGRATIONS, found, create)? {
            tx.batch_execute(script)
                .await
                .map_err(pg_error("migrate"))?;
        }
        tx.commit().await.map_err(pg_error("migrate"))
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
    /// release, renewal and wait recheck, one per purge batch (preparing a
    /// statement, once per connection, is not counted). For measuring, and
    /// for tests that count round trips.
    pub fn statements(&self) -> u64 {
        self.inner.statements.load(Ordering::Relaxed)
    }
}

/// The schema version of the database the client is connected to.
async fn version_of(client: &impl deadpool_postgres::GenericClient) -> StoreResult<u32> {
    let found: i32 = client
        .query_one(SCHEMA_VERSION_OF, &[])
        .await
        .map_err(pg_error("schema version"))?
        .try_get(0)
        .map_err(corrupt)?;
    let found = if found < 0 {
        client
            .query_one(NEWEST_VERSION, &[])
            .await
            .map_err(pg_error("schema version"))?
            .try_get::<_, i32>(0)
            .map_err(corrupt)?
    } else {
        found
    };
    Ok(u32::try_from(found).unwrap_or(0))
}

/// Reads a row of [`record_columns`].
fn read_record(found: &tokio_postgres::Row) -> StoreResult<Record> {
    let state: String = found.try_get("state").map_err(corrupt)?;
    let ending: Option<String> = found.try_get("ending").map_err(corrupt)?;
    let state = row::record_state(&state, ending.as_deref())?;
    let owner = if state == RecordState::Held {
        Some(row::owner_from(found.try_get("owner").map_err(corrupt)?)?)
    } else {
        None
    };
    Ok(Record {
        key: Key::from_recorded(found.try_get("key_text").map_err(corrupt)?),
        tool: ToolId::owned(found.try_get::<_, String>("tool").map_err(corrupt)?),
        state,
        fence: row::fence_from(found.try_get("fence").map_err(corrupt)?)?,
        taken_over: found.try_get("taken_over").map_err(corrupt)?,
        owner,
        lease_until: found.try_get("lease_until").map_err(corrupt)?,
        result: found
            .try_get::<_, Option<String>>("result")
            .map_err(corrupt)?
            .map(Recorded::from_json),
        finished_at: found.try_get("finished_at").map_err(corrupt)?,
        expires_at: Some(found.try_get("expires_at").map_err(corrupt)?),
    })
}

impl Inner {
    /// Runs one prepared statement and returns its rows.
    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<tokio_postgres::Row>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let failed = |err| pg_error(statement_name(sql))(err);
        let statement = client.prepare_cached(sql).await.map_err(failed)?;
        self.statements.fetch_add(1, Ordering::Relaxed);
        client.query(&statement, params).await.map_err(failed)
    }

    /// Runs one prepared statement and returns how many rows it touched.
    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<u64> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let failed = |err| pg_error(statement_name(sql))(err);
        let statement = client.prepare_cached(sql).await.map_err(failed)?;
        self.statements.fetch_add(1, Ordering::Relaxed);
        client.execute(&statement, params).await.map_err(failed)
    }

    /// The lease left on a claim if `owner` at `fence` still holds it.
    async fn held_by(
        &self,
        digest: [u8; 32],
        owner: u128,
        fence: u64,
    ) -> StoreResult<Option<Duration>> {
        self.lease_left(HELD_BY, digest, owner, fence).await
    }

    /// [`PostgresStore::held_by`], marking the row as waited for, so that
    /// its completion or release notifies.
    async fn mark_waiting(
        &self,
        digest: [u8; 32],
        owner: u128,
        fence: u64,
    ) -> StoreResult<Option<Duration>> {
        self.lease_left(MARK_WAITING, digest, owner, fence).await
    }

    async fn lease_left(
        &self,
        sql: &'static str,
        digest: [u8; 32],
        owner: u128,
        fence: u64,
    ) -> StoreResult<Option<Duration>> {
        let rows = self
            .query(
                sql,
                &[
                    &digest.as_slice(),
                    &row::owner_bytes(owner).as_slice(),
                    &row::fence_to(fence),
                ],
            )
            .await?;
        match rows.first() {
            None => Ok(None),
            Some(found) => {
                let left: i64 = found.try_get(0).map_err(corrupt)?;
                Ok(Some(Duration::from_millis(left.max(0).unsigned_abs())))
            }
        }
    }

    async fn claim(self: &Arc<Self>, req: ClaimRequest<'_>) -> StoreResult<ClaimAnswer> {
        let owner = row::new_owner()?;
        let digest = req.key.digest();
        // Subscribed before the statement: a completion after it is never
        // missed, as long as the listener was up when the statement began.
        let woken = self.listener.as_ref().map(|listener| {
            let woken = listener.watch(digest);
            let up = listener.is_up();
            if !up {
                listener.ensure();
            }
            (woken, up)
        });
        let owner_bytes = row::owner_bytes(owner);
        let lease = row::millis(req.lease);
        let retention = row::millis(req.retention);
        let tool = req.tool.as_str();
        let params: [&(dyn ToSql + Sync); 7] = [
            &digest.as_slice(),
            &req.key.as_str(),
            &tool,
            &req.fingerprint.as_bytes().as_slice(),
            &owner_bytes.as_slice(),
            &lease,
            &retention,
        ];
        for _ in 0..CLAIM_ATTEMPTS {
            let rows = self.query(CLAIM, &params).await?;
            // No row: the colliding claim committed after this statement's
            // snapshot. Run it again; the next snapshot sees it.
            let Some(found) = rows.first() else { continue };
            if found.try_get::<_, bool>("mine").map_err(corrupt)? {
                return Ok(ClaimAnswer::Claimed(Claim {
                    key: req.key.clone(),
                    owner,
                    fence: row::fence_from(found.try_get("fence").map_err(corrupt)?)?,
                    taken_over: found.try_get("taken_over").map_err(corrupt)?,
                    retention: req.retention,
                }));
            }
            // Takeable in the snapshot, yet not taken: the row changed
            // since. Run it again.
            if found.try_get::<_, bool>("stale").map_err(corrupt)? {
                continue;
            }
            let state: String = found.try_get("state").map_err(corrupt)?;
            let state = match state.as_str() {
                "held" => RowState::Held {
                    owner: row::owner_from(found.try_get("owner").map_err(corrupt)?)?,
                    fence: row::fence_from(found.try_get("fence").map_err(corrupt)?)?,
                    lease_left: Duration::from_millis(
                        found
                            .try_get::<_, Option<i64>>("lease_left_ms")
                            .map_err(corrupt)?
                            .unwrap_or(0)
                            .max(0)
                            .unsigned_abs(),
                    ),
                },
                "done" => RowState::Done {
                    ending: found
                        .try_get::<_, Option<String>>("ending")
                        .map_err(corrupt)?
                        .unwrap_or_default(),
                    result: found
                        .try_get::<_, Option<String>>("result")
                        .map_err(corrupt)?
                        .ok_or_else(|| {
                            StoreError::Corrupt("a finished row without a result".into())
                        })?,
                    finished_at: found
                        .try_get::<_, Option<SystemTime>>("finished_at")
                        .map_err(corrupt)?
                        .unwrap_or_else(SystemTime::now),
                },
                other => return Err(StoreError::Corrupt(format!("a row in state `{other}`"))),
            };
            let seen = Row {
                key_text: found.try_get("key_text").map_err(corrupt)?,
                tool: found.try_get("tool").map_err(corrupt)?,
                fingerprint: found.try_get("fingerprint").map_err(corrupt)?,
                state,
            };
            return match row::judge(&req, seen)? {
                Verdict::Answer(state) => Ok(state),
                Verdict::InFlight {
                    owner,
                    fence,
                    lease_left,
                } => Ok(ClaimAnswer::InFlight(wait_on(
                    Arc::clone(self),
                    woken,
                    digest,
                    owner,
                    fence,
                    lease_left,
                ))),
            };
        }
        Err(StoreError::Backend(
            format!(
                "the claim on key `{}` kept changing under {CLAIM_ATTEMPTS} attempts",
                req.key
            )
            .into(),
        ))
    }

    async fn complete(&self, claim: &Claim, finished: Finished) -> StoreResult<()> {
        let json = finished.value.to_json()?;
        let digest = claim.key.digest();
        let owner = row::owner_bytes(claim.owner);
        let statement = if self.asynchronous_completions {
            COMPLETE_ASYNC
        } else {
            COMPLETE
        };
        let changed = self
            .execute(
                statement,
                &[
                    &digest.as_slice(),
                    &owner.as_slice(),
                    &row::fence_to(claim.fence),
                    &finished.ending.as_str(),
                    &json.as_ref(),
                    &finished.finished_at,
                    &row::millis(claim.retention),
                ],
            )
            .await?;
        if changed == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> StoreResult<()> {
        let digest = claim.key.digest();
        let owner = row::owner_bytes(claim.owner);
        let changed = self
            .execute(
                RELEASE,
                &[
                    &digest.as_slice(),
                    &owner.as_slice(),
                    &row::fence_to(claim.fence),
                ],
            )
            .await?;
        if changed == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    async fn renew(&self, claim: &Claim, lease: Duration) -> StoreResult<()> {
        let digest = claim.key.digest();
        let owner = row::owner_bytes(claim.owner);
        let changed = self
            .execute(
                RENEW,
                &[
                    &digest.as_slice(),
                    &owner.as_slice(),
                    &row::fence_to(claim.fence),
                    &row::millis(lease),
                    &row::millis(claim.retention),
                ],
            )
            .await?;
        if changed == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    async fn purge_expired(&self) -> StoreResult<u64> {
        let batch = i64::try_from(self.purge_batch).unwrap_or(i64::MAX);
        let mut total = 0;
        loop {
            let deleted = self.execute(PURGE, &[&batch]).await?;
            total += deleted;
            if deleted < self.purge_batch as u64 {
                return Ok(total);
            }
        }
    }

    async fn forget(&self, key: &Key, how: Forget) -> StoreResult<bool> {
        let digest = key.digest();
        let force = how == Forget::Force;
        let rows = self.query(FORGET, &[&digest.as_slice(), &force]).await?;
        let found = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt("a forget that returned no row".into()))?;
        let forgotten: i64 = found.try_get("forgotten").map_err(corrupt)?;
        if forgotten > 0 {
            return Ok(true);
        }
        if found.try_get::<_, bool>("held").map_err(corrupt)? {
            return Err(StoreError::LiveClaim {
                key: key.as_str().to_owned(),
            });
        }
        Ok(false)
    }

    async fn list(&self, query: &RecordQuery) -> StoreResult<RecordPage> {
        let (state, ending) = query.state.map(RecordState::columns).unzip();
        let ending = ending.flatten();
        let age = query.older_than.map(row::millis);
        let page = query.page_size();
        let limit = i64::try_from(page + 1).unwrap_or(i64::MAX);
        let rows = self
            .query(
                LIST,
                &[
                    &state,
                    &ending,
                    &query.tool,
                    &query.run,
                    &age,
                    &query.after,
                    &limit,
                ],
            )
            .await?;
        let records = rows.iter().map(read_record).collect::<StoreResult<_>>()?;
        Ok(RecordPage::from_overfetch(records, page))
    }

    async fn inspect(&self, key: &Key) -> StoreResult<Option<Record>> {
        let digest = key.digest();
        let rows = self.query(INSPECT, &[&digest.as_slice()]).await?;
        let Some(found) = rows.first() else {
            return Ok(None);
        };
        let record = read_record(found)?;
        if record.key != *key {
            return Err(StoreError::Corrupt(format!(
                "key `{key}` shares its digest with the stored key `{}`",
                record.key
            )));
        }
        Ok(Some(record))
    }

    async fn count(&self) -> StoreResult<Vec<RecordCount>> {
        let rows = self.query(COUNT, &[]).await?;
        let mut counts = rows
            .iter()
            .map(|found| {
                let tool: String = found.try_get("tool").map_err(corrupt)?;
                let state: String = found.try_get("state").map_err(corrupt)?;
                let ending: Option<String> = found.try_get("ending").map_err(corrupt)?;
                let n: i64 = found.try_get("n").map_err(corrupt)?;
                Ok(RecordCount::new(
                    ToolId::owned(tool),
                    row::record_state(&state, ending.as_deref())?,
                    u64::try_from(n).unwrap_or(0),
                ))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        counts.sort_by(|a, b| (&a.tool, a.state).cmp(&(&b.tool, b.state)));
        Ok(counts)
    }
}

/// Waits until a claim held elsewhere may have changed.
///
/// - Listening since before the claim statement: mark the held row as
///   waited for (its completion or release then notifies), then wake on the
///   key's notification, when the lease would run out, or after
///   [`RECHECK_EVERY`]. The mark comes after subscribing, so a completion
///   either sees it and notifies, or came first and the mark finds no held
///   row: then claim again at once.
/// - The listener came up only now: the same, once it is up.
/// - No listener: poll with backoff.
///
/// A mark that fails (a table whose schema is older than this version) is
/// covered by the recheck timer: the waiter is late, never wrong.
fn wait_on(
    inner: Arc<Inner>,
    woken: Option<(KeyWatch, bool)>,
    digest: [u8; 32],
    owner: u128,
    fence: u64,
    lease_left: Duration,
) -> Wait {
    Wait::new(async move {
        match woken {
            Some((mut woken, up)) => {
                if up || woken.listener.up().await {
                    match inner.mark_waiting(digest, owner, fence).await {
                        Ok(Some(left)) => woken.until(left).await,
                        Ok(None) => {}
                        Err(_) => woken.until(lease_left).await,
                    }
                } else {
                    poll(&inner, Some(&mut woken), digest, owner, fence, lease_left).await;
                }
            }
            None => poll(&inner, None, digest, owner, fence, lease_left).await,
        }
    })
}

/// Polls with backoff until the claim is no longer held by `owner` at
/// `fence`, or the store fails (the caller then claims again and learns why).
async fn poll(
    inner: &Inner,
    mut woken: Option<&mut KeyWatch>,
    digest: [u8; 32],
    owner: u128,
    fence: u64,
    mut lease_left: Duration,
) {
    let (first, max) = POLL;
    let mut backoff = Backoff::new(first, max);
    loop {
        let nap = backoff.nap(lease_left);
        match woken.as_deref_mut() {
            Some(woken) => {
                tokio::select! {
                    () = woken.changed() => return,
                    () = tokio::time::sleep(nap) => {}
                }
            }
            None => tokio::time::sleep(nap).await,
        }
        match inner.held_by(digest, owner, fence).await {
            Ok(Some(left)) => lease_left = left,
            Ok(None) | Err(_) => return,
        }
    }
}

type SessionFn = Box<
    dyn Fn(Weak<Listener>, watch::Receiver<()>) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Down,
    Connecting,
    Up,
}

/// One connection that `LISTEN`s for completions, shared by every waiter of
/// a store, and the per-key channels it wakes.
struct Listener {
    session: SessionFn,
    status: watch::Sender<Status>,
    waiters: DashMap<[u8; 32], watch::Sender<()>>,
    /// Dropped with the listener, which ends its session.
    stop: watch::Sender<()>,
}

impl Listener {
    fn new(session: SessionFn) -> Arc<Listener> {
        Arc::new(Listener {
            session,
            status: watch::Sender::new(Status::Down),
            waiters: DashMap::new(),
            stop: watch::Sender::new(()),
        })
    }

    fn is_up(&self) -> bool {
        *self.status.borrow() == Status::Up
    }

    /// Starts a listening session if none is running (and a runtime is).
    fn ensure(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let start = self.status.send_if_modified(|status| {
            if *status == Status::Down {
                *status = Status::Connecting;
                true
            } else {
                false
            }
        });
        if start {
            handle.spawn((self.session)(Arc::downgrade(self), self.stop.subscribe()));
        }
    }

    /// Waits until listening; `false` if the connection attempt failed.
    async fn up(self: &Arc<Self>) -> bool {
        self.ensure();
        let mut status = self.status.subscribe();
        loop {
            match *status.borrow_and_update() {
                Status::Up => return true,
                Status::Down => return false,
                Status::Connecting => {}
            }
            if status.changed().await.is_err() {
                return false;
            }
        }
    }

    fn watch(self: &Arc<Self>, digest: [u8; 32]) -> KeyWatch {
        let rx = self
            .waiters
            .entry(digest)
            .or_insert_with(|| watch::Sender::new(()))
            .subscribe();
        KeyWatch {
            listener: Arc::clone(self),
            digest,
            rx: Some(rx),
        }
    }

    fn notify(&self, payload: &str) {
        let mut digest = [0u8; 32];
        if hex::decode_to_slice(payload, &mut digest).is_err() {
            return;
        }
        if let Some(waiters) = self.waiters.get(&digest) {
            waiters.send_replace(());
        }
    }

    /// Wakes every waiter: notifications may have been lost.
    fn wake_all(&self) {
        for waiters in self.waiters.iter() {
            waiters.send_replace(());
        }
    }
}

/// A subscription to one key's wake-ups; unsubscribes when dropped.
struct KeyWatch {
    listener: Arc<Listener>,
    digest: [u8; 32],
    rx: Option<watch::Receiver<()>>,
}

impl KeyWatch {
    /// Until the key's notification, the holder's lease running out, or
    /// [`RECHECK_EVERY`], whichever comes first.
    async fn until(&mut self, lease_left: Duration) {
        let nap = (lease_left + LEASE_MARGIN).min(RECHECK_EVERY);
        tokio::select! {
            () = self.changed() => {}
            () = tokio::time::sleep(nap) => {}
        }
    }

    async fn changed(&mut self) {
        match self.rx.as_mut() {
            // An error means the sender is gone: wake as well.
            Some(rx) => {
                let _ = rx.changed().await;
            }
            None => std::future::pending().await,
        }
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        drop(self.rx.take());
        self.listener
            .waiters
            .remove_if(&self.digest, |_, sender| sender.receiver_count() == 0);
    }
}

/// Marks the listener down when its session ends, however it ends (an
/// error, the store dropped, the runtime shut down), and wakes every waiter.
struct DownOnDrop(Weak<Listener>);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if let Some(listener) = self.0.upgrade() {
            listener.status.send_replace(Status::Down);
            listener.wake_all();
        }
    }
}

/// One listening session: connect, `LISTEN`, then deliver notifications
/// until the connection or the store goes away.
async fn listen<T>(listener: Weak<Listener>, mut stop: watch::Receiver<()>, config: Config, tls: T)
where
    T: MakeTlsConnect<Socket> + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let _down = DownOnDrop(listener.clone());
    let Ok((client, mut connection)) = config.connect(tls).await else {
        return;
    };
    let mut listen = pin!(client.batch_execute("LISTEN idempotent_claims"));
    let mut listening = false;
    loop {
        tokio::select! {
            done = &mut listen, if !listening => {
                if done.is_err() {
                    return;
                }
                listening = true;
                match listener.upgrade() {
                    Some(listener) => {
                        listener.status.send_replace(Status::Up);
                    }
                    None => return,
                }
            }
            message = poll_fn(|cx| connection.poll_message(cx)) => match message {
                Some(Ok(AsyncMessage::Notification(note))) => match listener.upgrade() {
                    Some(listener) => listener.notify(note.payload()),
                    None => return,
                },
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
            _ = stop.changed() => return,
        }
    }
}

impl Store for PostgresStore {
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
        "postgres"
    }

    /// A third of the lease: two renewals may fail or come late before
    /// another host takes the claim over.
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        Some(lease / 3)
    }
}
