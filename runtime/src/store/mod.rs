//! Stores: where claims and records live.
//!
//! Every store answers the same atomic question, [`Store::claim`]: may this
//! caller act under this key, or has someone acted or is acting already? The
//! guard in [`crate::Call`] builds everything else on that one call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::outcome::ConflictReason;
use crate::record::{Finished, Recorded};
use crate::tool::ToolId;

mod inspect;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod purger;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod row;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod schema;
#[cfg(feature = "sqlite")]
pub mod sqlite;

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

/// A store's future: ready at once for in-memory stores (no allocation),
/// boxed for stores that do I/O.
pub struct StoreFuture<'a, T>(Inner<'a, T>);

enum Inner<'a, T> {
    Ready(Option<T>),
    Boxed(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// A value that is already there.
    pub fn ready(value: T) -> StoreFuture<'a, T> {
        StoreFuture(Inner::Ready(Some(value)))
    }

    /// A future that does I/O.
    pub fn boxed(fut: impl Future<Output = T> + Send + 'a) -> StoreFuture<'a, T> {
        StoreFuture(Inner::Boxed(Box::pin(fut)))
    }

    /// The value, if the store answered without waiting.
    pub(crate) fn into_ready(self) -> Result<T, StoreFuture<'a, T>> {
        match self.0 {
            Inner::Ready(Some(value)) => Ok(value),
            other => Err(StoreFuture(other)),
        }
    }
}

// The ready value is moved out, never pinned, so the future is always Unpin.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.0 {
            Inner::Ready(value) => match value.take() {
                Some(value) => Poll::Ready(value),
                None => Poll::Pending,
            },
            Inner::Boxed(fut) => fut.as_mut().poll(cx),
        }
    }
}

/// A request to claim a key.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The key.
    pub key: &'a Key,
    /// The tool asking.
    pub tool: &'a ToolId,
    /// The arguments beyond the key.
    pub fingerprint: Fingerprint,
    /// How long the claim holds without renewal before another caller may
    /// take it over.
    pub lease: Duration,
    /// How long the record is kept once finished.
    pub retention: Duration,
}

/// A held claim: the right to act under a key, until completed or released.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The key claimed.
    pub key: Key,
    /// Who holds it. Completion and release check it.
    pub owner: u128,
    /// Bumped by every takeover. A holder whose fence is behind has lost its
    /// claim.
    pub fence: u64,
    /// Whether this claim took over from a holder whose lease expired: that
    /// holder may or may not have acted.
    pub taken_over: bool,
    /// How long the record is kept once finished.
    pub retention: Duration,
}

/// The answer to a claim.
#[derive(Debug)]
pub enum ClaimAnswer {
    /// The caller holds the claim and must act, then complete or release.
    Claimed(Claim),
    /// Another caller holds the claim with the same tool and arguments.
    /// Await the [`Wait`], then claim again.
    InFlight(Wait),
    /// The action finished earlier with the same tool and arguments.
    Completed(Finished),
    /// The key was used for a different request.
    Conflict {
        /// What differed.
        reason: ConflictReason,
        /// The first request's result, if it finished successfully and came
        /// from the same tool.
        first: Option<Recorded>,
    },
}

/// Resolves when an in-flight claim may have changed: completed, released or
/// expired. The caller then claims again.
pub struct Wait(Pin<Box<dyn Future<Output = ()> + Send + 'static>>);

impl Wait {
    /// Wraps a store's wake-up future.
    pub fn new(fut: impl Future<Output = ()> + Send + 'static) -> Wait {
        Wait(Box::pin(fut))
    }
}

impl Future for Wait {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Wait")
    }
}

/// A store's failure.
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
    /// [`Store::forget_with`] was asked to remove a claim whose lease is
    /// live: its action may be running right now, and forgetting it would
    /// let a repeat run the action a second time alongside it.
    #[error(
        "key `{key}` is held by a claim whose lease is live, so its action may be running now; \
         wait for it to finish or for its lease to run out, or force the removal if its holder \
         is known to be gone"
    )]
    LiveClaim {
        /// The key's text.
        key: String,
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
    /// The store does not implement this operation (a store written
    /// outside this library that keeps only what the guard needs).
    #[error("this store does not support `{0}`")]
    Unsupported(&'static str),
}

/// A result type for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

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
pub trait Store: Send + Sync + 'static {
    /// Claims a key, atomically: the caller holds it, or learns who does,
    /// or gets the finished record, or a conflict.
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>>;

    /// Records the finished action under a held claim and wakes waiters.
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Finished,
    ) -> StoreFuture<'a, StoreResult<()>>;

    /// Gives a held claim up without a record, so a retry acts again, and
    /// wakes waiters.
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>>;

    /// Renews a held claim's lease, for actions longer than it.
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>>;

    /// Removes finished records whose retention has passed. Returns how many
    /// were removed. Never removes a held claim.
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
    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>>;

    /// [`Store::forget_with`] with [`Forget::UnlessLive`]: never removes a
    /// claim whose action may be running.
    fn forget<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<bool>> {
        self.forget_with(key, Forget::UnlessLive)
    }

    /// Lists records matching `query`, one page at a time, in the order of
    /// their keys' text. For operators; the guard never calls it.
    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        let _ = query;
        StoreFuture::ready(Err(StoreError::Unsupported("list")))
    }

    /// Reads one key's record in full, if there is one.
    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        let _ = key;
        StoreFuture::ready(Err(StoreError::Unsupported("inspect")))
    }

    /// Counts records by tool and state, in the order of tool, then state.
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

    /// How often the guard renews a held claim's lease while its action runs,
    /// or `None` if leases never expire under a live holder (the memory
    /// store: a crash loses the whole store with the holder).
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        let _ = lease;
        None
    }
}

static DEFAULT_STORE: LazyLock<ArcSwap<Arc<dyn Store>>> =
    LazyLock::new(|| ArcSwap::from_pointee(Arc::new(MemoryStore::new()) as Arc<dyn Store>));

/// The process default store: a [`MemoryStore`] unless switched with
/// [`set_default_store`].
pub fn default_store() -> Arc<dyn Store> {
    Arc::clone(&DEFAULT_STORE.load())
}

/// Switches the process default store, in one line:
///
/// ```
/// use std::sync::Arc;
/// use idempotent_tools::{MemoryStore, set_default_store};
///
/// set_default_store(Arc::new(MemoryStore::new()));
/// ```
///
/// Calls already running keep the store they started with.
pub fn set_default_store(store: Arc<dyn Store>) {
    DEFAULT_STORE.store(Arc::new(store));
}

/// Something a call site can name as its store: an `Arc` of a store, or a
/// reference to one.
pub trait IntoStore {
    /// The store as a trait object.
    fn into_store(self) -> Arc<dyn Store>;
}

impl<S: Store> IntoStore for Arc<S> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}

impl IntoStore for Arc<dyn Store> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}

impl<T: IntoStore + Clone> IntoStore for &T {
    fn into_store(self) -> Arc<dyn Store> {
        self.clone().into_store()
    }
}
