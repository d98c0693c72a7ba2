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
mod inspect;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod purger;
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
pub use inspect::{
    DEFAULT_PAGE, Forget, MAX_PAGE, Record, RecordCount, RecordPage, RecordQuery, RecordState,
};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use purger::{Purger, PurgerError};
#[cfg(feature = "redis")]
pub use redis::RedisStore;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use schema::SCHEMA_VERSION;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::record::Finished;
#[cfg(doc)]
use crate::record::Recorded;
use crate::tool::ToolId;

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
/// that account: for stores that do I/O it runs claims, completions and
/// releases on tasks of their own ([`Store::answers_at_once`]).
///
/// # Writing a store
///
/// A store of one's own implements the required methods and keeps the
/// defaults of the rest:
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools::store::{
///     Claim, ClaimAnswer, ClaimRequest, Forget, Store, StoreFuture, StoreResult,
/// };
/// use idempotent_tools::{Finished, Key, MemoryStore};
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
///     fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
///         self.inner.purge_expired()
///     }
///     fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
///         self.inner.forget_with(key, how)
///     }
/// }
/// ```
pub trait Store: Send + Sync + 'static {
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

    /// Removes finished records whose retention has passed. Returns how many
    /// were removed. Never removes a held claim.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] or [`StoreError::Backend`] if a purge
    /// statement fails; batches already purged stay purged.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each batch is removed whole or not at all, and the next
    /// purge picks up what is left.
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>>;

    /// Removes what is recorded under a key, so the action may run again:
    /// for operators resolving an unknown outcome or a crashed holder.
    /// Returns whether anything was removed.
    ///
    /// With [`Forget::UnlessLive`], a finished record or a claim whose lease
    /// ran out is removed, and a claim whose lease is live is refused with
    /// [`StoreError::LiveClaim`]. With [`Forget::Force`], a live claim is
    /// removed too and its waiters are woken; its holder's completion then
    /// reports [`StoreError::LeaseLost`].
    ///
    /// # Errors
    ///
    /// [`StoreError::LiveClaim`] for a live claim under
    /// [`Forget::UnlessLive`]; [`StoreError::Unavailable`] if the store
    /// cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the record is removed or not.
    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>>;

    /// [`Store::forget_with`] with [`Forget::UnlessLive`]: never removes a
    /// claim whose action may be running.
    ///
    /// # Errors
    ///
    /// As [`Store::forget_with`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Store::forget_with`].
    fn forget<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<bool>> {
        self.forget_with(key, Forget::UnlessLive)
    }

    /// Lists records matching `query`, one page at a time, in the order of
    /// their keys' text. For operators; the guard never calls it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unsupported`] from a store that does not list (the
    /// default); [`StoreError::Unavailable`] if the store cannot be reached;
    /// [`StoreError::Corrupt`] for a record it cannot read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        let _ = query;
        StoreFuture::ready(Err(StoreError::Unsupported("list")))
    }

    /// Reads one key's record in full, if there is one.
    ///
    /// # Errors
    ///
    /// As [`Store::list`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        let _ = key;
        StoreFuture::ready(Err(StoreError::Unsupported("inspect")))
    }

    /// Counts records by tool and state, in the order of tool, then state.
    ///
    /// # Errors
    ///
    /// As [`Store::list`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        StoreFuture::ready(Err(StoreError::Unsupported("count")))
    }

    /// The store's kind as traces and metrics name it: `memory`, `sqlite`,
    /// `postgres`, or `custom` for stores written elsewhere.
    fn kind(&self) -> &'static str {
        "custom"
    }

    /// Whether every method's future is ready as soon as it is returned
    /// (the memory store). The guard then calls the store inline. Otherwise
    /// it runs claims, completions and releases on tasks of their own, so
    /// that a call dropped at any `.await` never leaves a claim nobody owns
    /// nor loses the record of an action that ran.
    fn answers_at_once(&self) -> bool {
        false
    }

    /// Hands `replay` the record of `key`'s finished action, if
    /// [`Store::claim`] would answer [`ClaimAnswer::Completed`] with it for
    /// this tool and fingerprint: a replay answered from memory, by the
    /// key's text.
    ///
    /// A store that [answers at once](Store::answers_at_once) is asked this
    /// before the claim, so that a repeat of a finished call never makes
    /// its key a shared value. The record is lent, not returned, so the
    /// guard reads the result out of it where it lies (the memory store
    /// calls `replay` under its shard's read lock) and a replay allocates
    /// nothing but the clone of the result. Not calling `replay` is always
    /// a correct answer (the default): the guard then claims as usual. A
    /// store calls it at most once.
    fn replay_at_once(
        &self,
        key: &str,
        tool: &ToolId,
        fingerprint: Fingerprint,
        replay: &mut dyn FnMut(&Finished),
    ) {
        let _ = (key, tool, fingerprint, replay);
    }

    /// How often the guard renews a held claim's lease while its action runs,
    /// or `None` if leases never expire under a live holder (the memory
    /// store: a crash loses the whole store with the holder).
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        let _ = lease;
        None
    }
}
