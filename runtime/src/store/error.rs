//! What a store's step can fail with.

#[cfg(doc)]
use super::{Forget, Store};

/// A store's failure.
///
/// What each store does with its own errors, and what the guard then does:
///
/// | What happened | SQLite | Postgres | Redis | The guard |
/// |---|---|---|---|---|
/// | the connection broke: a restart, a failover, a session ended, a dropped socket | (a file) | tried again on another connection for `reconnect_within` | tried again as the connection comes back, for `reconnect_within` | sees the step succeed |
/// | still away after that, or never reached | | `Unavailable` | `Unavailable` | a claim: the action does not run; a completion or release: tried again while the lease holds, then [`Error::NotRecorded`](crate::Error::NotRecorded) |
/// | another writer holds the lock: busy, a lock timeout, a serialization failure, a deadlock | waits `busy_timeout`, then `Contended` | `Contended` (55P03, 40001, 40P01) | (none: one script at a time) | a claim: tried again until the call's `wait` runs out, then reported; a completion or release: tried again while the lease holds |
/// | a replica missed a write (`wait_for_replicas`) | | | `Unavailable`, the claim released first | as above |
/// | the holder's claim was taken over | `LeaseLost` | `LeaseLost` | `LeaseLost` | the action ran, its result is not kept: [`Error::LeaseLost`](crate::Error::LeaseLost) |
/// | anything else the server refuses | `Backend` | `Backend`, naming the statement and SQLSTATE | `Backend` | a claim: the action does not run |
///
/// The store suites cover each row against a real server:
/// - a broken connection: a Redis server killed and started again, and a
///   Postgres server shut down and started again, under calls (the
///   conformance suite's restart cases); a Postgres server cut off by a
///   proxy and let back; calls dropped while their steps try again;
/// - still away: a server never reached refuses the claim; one that stays
///   away past the lease leaves the completion
///   [`NotRecorded`](crate::Error::NotRecorded), the action having run;
/// - another writer: a claim and a replay that meet a Postgres table locked
///   past `lock_timeout`, or a SQLite file locked past its `busy_timeout`,
///   wait for the lock and then act (or replay) once, and one locked past
///   the call's `wait` is refused as `Contended`; a Postgres completion
///   refused by a serialization failure, and one chosen as a deadlock's
///   victim, are tried again and recorded;
/// - a replica short: a Redis claim that `WAIT` finds on too few replicas;
/// - a takeover: the conformance suite's lease cases, on every store;
/// - anything else: a trigger that refuses claims (SQLite, Postgres), a
///   Redis record key holding a string.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The claim was taken over by another holder after its lease expired.
    #[error("the claim was taken over after its lease expired")]
    LeaseLost,
    /// The store could not be reached, or was too busy to answer in time.
    /// Trying again later may work.
    #[error("the store is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The step gave way to another writer: a lock held past the store's
    /// own timeout (Postgres's `lock_timeout`, SQLite's busy timeout), a
    /// serialization failure, a deadlock. It changed nothing, and may go
    /// again at once: the guard tries a claim again until the call's `wait`
    /// runs out, and a completion or release while its lease holds, before
    /// it reports this.
    #[error("the store gave way to another writer")]
    Contended(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store could not be opened where it was told to live: a SQLite
    /// file whose directory is missing or not writable, say. Nothing was
    /// done; fix the place, then open the store again.
    #[error("cannot open the {store} store at `{place}`")]
    CannotOpen {
        /// The kind of store, as people call it: `SQLite`.
        store: &'static str,
        /// Where it was asked to open: the file's path.
        place: String,
        /// Why, in the store's own words.
        #[source]
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store answered with an error.
    #[error("the store failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A stored record could not be read.
    #[error("a stored record is corrupt: {0}")]
    Corrupt(String),
    /// A result cannot be stored faithfully: it does not serialize, or does
    /// not read back as itself (a `NaN` becomes `null`). Stores that keep
    /// JSON refuse it on completion, before a replay could trip on it.
    #[error("the result cannot be stored faithfully as JSON")]
    Unrecordable(#[source] serde_json::Error),
    /// [`Records::forget_with`](super::Records::forget_with) was asked to
    /// remove a claim whose lease is live, or
    /// [`Records::resolve`](super::Records::resolve) to resolve one: its
    /// action may be running right now, and forgetting it would let a
    /// repeat run the action a second time alongside it. A forget may be
    /// forced ([`Forget::Force`](super::Forget::Force)) for a holder known
    /// to be gone; a resolve never is.
    #[error(
        "key `{key}` is held by a claim whose lease is live, so its action may be running now; \
         wait for it to finish or for its lease to run out"
    )]
    LiveClaim {
        /// The key's text.
        key: String,
    },
    /// [`Records::resolve`](super::Records::resolve) found no record under
    /// the key (or only one past its retention, which counts as none).
    #[error("there is no record under key `{key}` to resolve")]
    NoRecord {
        /// The key's text.
        key: String,
    },
    /// [`Records::resolve`](super::Records::resolve) found a record whose
    /// outcome is known: only an `unknown` outcome, or a claim whose lease
    /// ran out, is resolved. Nothing was changed.
    #[error(
        "key `{key}` is {state}, so its outcome is known: only an unknown outcome, or a claim \
         whose lease ran out, is resolved"
    )]
    NotUnknown {
        /// The key's text.
        key: String,
        /// The record's state.
        state: crate::store::state::RecordState,
    },
    /// The database holds no schema of this library: it was never migrated,
    /// or this is not the database the application uses.
    #[error(
        "the database has no `idempotent_claims` table: point at the database the application \
         uses, or create the schema (`SqliteStore::open`, `PostgresStore::migrate`)"
    )]
    MissingSchema,
    /// The database's schema is newer than this build of the library
    /// understands; writing to it could break the newer code's records.
    #[error(
        "the database's schema is version {found}, newer than the version {supported} this build \
         understands; upgrade this program to a release that knows version {found}"
    )]
    SchemaTooNew {
        /// The version the database records.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// A store was built with a setting it refuses, such as a Postgres
    /// schema name that is not a plain identifier; nothing was connected.
    #[error("the store's `{setting}` setting is refused: {problem}")]
    BadSetting {
        /// The builder's setting.
        setting: &'static str,
        /// What is wrong with it, and what is accepted.
        problem: String,
    },
    /// A store's [`Records`](super::Records) cannot do this operation (a
    /// store written outside this library that lists but cannot count, say).
    #[error("this store does not support `{0}`")]
    Unsupported(&'static str),
}

/// A result type for store operations.
pub type StoreResult<T> = Result<T, StoreError>;
