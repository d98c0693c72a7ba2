//! Stores: where claims and records live.
//!
//! Every store answers the same atomic question, [`Store::claim`]: may this
//! caller act under this key, or has someone acted or is acting already? The
//! guard in [`crate::Call`] builds everything else on that one call.
//!
//! - this module: the [`Store`] trait and its contract;
//! - `claim`: a claim requested, held, and answered;
//! - `error`: what a step can fail with;
//! - `future`: the future a step returns;
//! - `default`: the process default store;
//! - `inspect`: what an operator reads;
//! - one module per store: [`memory`], `sqlite`, `postgres`, over the
//!   shared core of the durable ones (`durable`), and `redis`.

use std::time::Duration;

mod claim;
mod default;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod durable;
mod error;
mod future;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod purger;
mod records;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod schema;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use claim::{Claim, ClaimAnswer, ClaimRequest, Wait};
pub use default::{IntoStore, default_store, set_default_store};
pub use error::{StoreError, StoreResult};
pub use future::StoreFuture;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use purger::{Purger, PurgerError};
pub use records::{
    DEFAULT_PAGE, Forget, MAX_PAGE, Record, RecordCount, RecordPage, RecordQuery, RecordState,
    Records,
};
#[cfg(feature = "redis")]
pub use redis::RedisStore;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use schema::SCHEMA_VERSION;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

use std::any::Any;

use crate::record::Finished;
#[cfg(doc)]
use crate::record::Recorded;

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
/// - [`Store::complete`] refuses a result that [`Recorded::to_json`] refuses
///   with [`StoreError::Unrecordable`], before writing anything, if the store
///   keeps JSON;
/// - [`StoreError::Unavailable`] means nothing was done, or the step may be
///   tried again safely: the guard retries completions and releases on it;
/// - a held claim is never purged; a finished record is purged only after
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
/// implementing [`Records`], which the command-line tool, the [`Purger`]
/// and the conformance suite's record cases use.
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
/// use idempotent_tools::{Finished, MemoryStore};
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
///     fn complete<'a>(&'a self, claim: &'a Claim, finished: Finished) -> StoreFuture<'a, StoreResult<()>> {
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
    /// or gets the finished record, or a conflict.
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

    /// Records the finished action under a held claim and wakes waiters.
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
        finished: Finished,
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
