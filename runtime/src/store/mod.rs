//! For store writers: the claim protocol every store speaks, and each
//! store's settings.
//!
//! Every store answers the same atomic question, [`Store::claim`]: may this
//! caller act under this key, or has someone acted or is acting already? The
//! guard in [`Call`](crate::call::Call) builds everything else on that one
//! call. The stores themselves are at the crate's root; their builders,
//! defaults and schemas are in [`memory`], `sqlite`, `postgres` and `redis`.
//!
//! In the source: `claim` holds a claim requested, held, and answered;
//! `error` what a step can fail with; `future` the future a step returns;
//! `default` the process default store; `records` and `purger` what an
//! operator reads and cleans; one module per store, over the shared core of
//! the durable ones (`durable`).

use std::time::Duration;

mod claim;
pub(crate) mod default;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod durable;
mod error;
mod future;
#[path = "memory/mod.rs"]
pub(crate) mod memory_store;
#[cfg(feature = "postgres")]
#[path = "postgres/mod.rs"]
pub(crate) mod postgres_store;
pub(crate) mod purger;
pub(crate) mod record;
pub(crate) mod records;
#[cfg(feature = "redis")]
#[path = "redis/mod.rs"]
pub(crate) mod redis_store;
mod resolution;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod schema;
#[cfg(feature = "sqlite")]
#[path = "sqlite/mod.rs"]
pub(crate) mod sqlite_store;
pub(crate) mod state;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod transaction;
pub(crate) mod view;

pub use crate::store::record::{Completion, RecordValue};
pub use claim::{Claim, ClaimAnswer, ClaimRequest, Wait};
pub use default::{IntoStore, default_store};
#[cfg(any(feature = "postgres", feature = "redis"))]
pub use durable::reconnect::DEFAULT_RECONNECT_WITHIN;
pub use error::{StoreError, StoreResult};
pub use future::StoreFuture;
pub(crate) use memory_store::MemoryStore;
pub(crate) use record::RecordState;
pub(crate) use records::{Forget, Record, RecordCount, RecordPage, RecordQuery, Records};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use schema::SCHEMA_VERSION;

/// The memory store's settings. The store is [`crate::MemoryStore`].
pub mod memory {
    pub use super::memory_store::DEFAULT_SWEEP_EVERY;
}

/// The SQLite store's builder, settings and schema. The store is
/// [`SqliteStore`](crate::SqliteStore).
#[cfg(feature = "sqlite")]
pub mod sqlite {
    pub use super::sqlite_store::{
        DEFAULT_BUSY_TIMEOUT, DEFAULT_POLL_FIRST, DEFAULT_POLL_MAX, DEFAULT_PURGE_BATCH,
        SQLITE_SCHEMA, SqliteStoreBuilder, rusqlite,
    };
}

/// The Postgres store's builder, settings and schema. The store is
/// [`PostgresStore`](crate::PostgresStore).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use super::postgres_store::{
        DEFAULT_COALESCE_BATCH, DEFAULT_PURGE_BATCH, LISTENER_NAME, NOTIFY_CHANNEL,
        POSTGRES_SCHEMA, PostgresStoreBuilder, RECHECK_EVERY, deadpool_postgres, tokio_postgres,
    };
}

/// The Redis store's builder and settings. The store is
/// [`RedisStore`](crate::RedisStore).
#[cfg(feature = "redis")]
pub mod redis {
    pub use super::redis_store::{
        DEFAULT_COALESCE_BATCH, DEFAULT_COALESCE_IN_FLIGHT, DEFAULT_PREFIX, RECHECK_EVERY,
        RedisStoreBuilder, redis,
    };
}

use std::any::Any;

/// Where claims and records live.
///
/// The trait is object safe: stores are used as `Arc<dyn Store>`. Each method
/// must be atomic on its own; in particular [`Store::claim`] answers in one
/// step, so there is never a check followed by an act.
///
/// Implementations must hold:
/// - at most one live [`Claim`] per key;
/// - [`Store::complete`] and [`Store::release`] change nothing, and return
///   [`StoreError::LeaseLost`], unless the claim's owner and fence are
///   current; completing a claim that the same owner and fence already
///   completed succeeds again (the guard retries a completion whose reply
///   was lost);
/// - [`Store::complete`] refuses a result that [`RecordValue::to_json`] refuses
///   with [`StoreError::Unrecordable`], before writing anything, if the store
///   keeps JSON;
/// - [`StoreError::Unavailable`] means nothing was done, or the step may be
///   tried again safely: the guard retries completions and releases on it;
/// - [`StoreError::Contended`] means the step gave way to another writer and
///   changed nothing: the guard also tries a claim again on it, while the
///   call may wait;
/// - a held claim is never purged; a completed record is purged only after
///   its retention;
/// - a [`Wait`] never misses a completion or release that happens after the
///   claim that returned it.
///
/// # Cancel safety
///
/// A step's future may be dropped at any `.await`: the step then happened
/// or did not, and nothing else. The guard never leaves a claim behind on
/// that account: it runs claims, completions and releases on tasks of their
/// own.
///
/// # The operator's calls
///
/// Listing, inspecting, counting, forgetting and purging records are not
/// part of the protocol the guard needs: a store offers them by also
/// implementing [`Records`], which the command-line tool, the
/// [`Purger`](crate::records::Purger) and the conformance suite's record
/// cases use.
///
/// # Writing a store
///
/// A store of one's own implements the four steps and keeps the defaults of
/// the two hints:
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools::store::{
///     Claim, ClaimAnswer, ClaimRequest, Store, StoreFuture, StoreResult,
/// };
/// use idempotent_tools::{MemoryStore, store::Completion};
///
/// /// A memory store that counts claims.
/// struct Counting {
///     inner: MemoryStore,
///     claims: std::sync::atomic::AtomicU64,
/// }
///
/// impl Store for Counting {
///     fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
///         self.claims.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         self.inner.claim(req)
///     }
///     fn complete<'a>(&'a self, claim: &'a Claim, finished: Completion) -> StoreFuture<'a, StoreResult<()>> {
///         self.inner.complete(claim, finished)
///     }
///     fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
///         self.inner.release(claim)
///     }
///     fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
///         self.inner.renew(claim, lease)
///     }
/// }
/// ```
pub trait Store: Any + Send + Sync {
    /// Claims a key, atomically: the caller holds it, or learns who does,
    /// or gets the completed record, or a conflict.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] if the store cannot be reached (nothing
    /// was claimed, so the action must not run);
    /// [`StoreError::Backend`] or [`StoreError::Corrupt`] if it answered
    /// with an error or with a row it cannot read.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the store took the claim, the future
    /// leaves a claim nobody holds, which waits for its lease to run out
    /// (for ever in a memory store, unless released). The guard runs it on
    /// a task of its own for that reason.
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>>;

    /// Records the completed action under a held claim and wakes waiters.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`] if the claim is no longer held by its owner
    /// at its fence (nothing is written); [`StoreError::Unrecordable`] if
    /// the result does not store as JSON (checked before any I/O);
    /// [`StoreError::Unavailable`] if the store cannot be reached, in which
    /// case trying again is safe.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that a completion is written whole or not at all; but
    /// a dropped completion may or may not have been written, and the
    /// action's result is lost to repeats if it was not. The guard runs it
    /// on a task of its own, and retries it.
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>>;

    /// Gives a held claim up without a record, so a retry acts again, and
    /// wakes waiters.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`] if the claim is no longer held by its owner
    /// at its fence (nothing is removed); [`StoreError::Unavailable`] if the
    /// store cannot be reached, in which case trying again is safe.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release happened or did not; if not, the claim
    /// stays until its lease runs out.
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>>;

    /// Renews a held claim's lease, for actions longer than it.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`] if the claim is no longer held by its owner
    /// at its fence: another caller may take it over, and the action should
    /// stop if it can; [`StoreError::Unavailable`] if the store cannot be
    /// reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is renewed or not.
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>>;

    /// The store's kind as traces and metrics name it: `memory`, `sqlite`,
    /// `postgres`, or `custom` for stores written elsewhere.
    fn kind(&self) -> &'static str {
        "custom"
    }

    /// How often the guard renews a held claim's lease while its action runs,
    /// or `None` if leases never expire under a live holder (the memory
    /// store: a crash loses the whole store with the holder).
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        let _ = lease;
        None
    }
}
