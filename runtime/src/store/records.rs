//! The operator's calls on a store ([`Records`]) and what they read:
//! records listed with filters and paging, one record in full, counts by
//! state and tool.
//!
//! The guard never calls these; they are for dashboards, scripts and the
//! command-line tool, to find and resolve what the guard cannot (an unknown
//! outcome, a claim whose holder crashed).

use std::time::{Duration, SystemTime};

pub use super::resolution::Resolution;
pub use super::view::{Record, RecordCount};
use super::{Store, StoreError, StoreFuture, StoreResult};
use crate::key::Key;
use crate::store::record::RecordState;
#[cfg(doc)]
use crate::store::record::RecordValue;

/// What one call of [`Records::purge_expired_batch`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgedBatch {
    /// How many records the batch removed.
    pub removed: u64,
    /// Whether the batch was full, so more expired records may be left.
    pub more: bool,
}

/// The most records one page holds, whatever a query asks for.
pub const MAX_PAGE: usize = 1000;

/// The records a page holds unless a query says otherwise.
pub const DEFAULT_PAGE: usize = 100;

/// The operator's calls on a store: list, inspect and count its records,
/// forget a key, purge what has expired.
///
/// Not part of the claim protocol: the guard never calls them, and a store
/// that implements only [`Store`] guards calls as well as any. A store that
/// also implements `Records` can be read and cleaned by the command-line
/// tool, kept by a [`Purger`](crate::records::Purger), and run through the
/// conformance suite's record cases. Every store of this crate implements
/// it.
///
/// ```
/// use idempotent_tools::{MemoryStore, records::{RecordQuery, Records}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::store::StoreError> {
/// let store = MemoryStore::new();
/// let page = store.list(&RecordQuery::new()).await?;
/// assert!(page.records.is_empty());
/// assert_eq!(store.purge_expired().await?, 0);
/// # Ok(()) }
/// ```
pub trait Records: Store {
    /// Removes completed records whose retention has passed. Returns how many
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

    /// Removes one batch of expired records: the step
    /// [`Records::purge_expired`] repeats until nothing is left, for a
    /// caller that paces the batches itself (a
    /// [`Purger`](crate::records::Purger) with a pause). The durable
    /// stores delete at most their purge batch (`purge_batch` on their
    /// builders) per call; by default the whole purge is one batch.
    ///
    /// # Errors
    ///
    /// As [`Records::purge_expired`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the batch is removed whole or not at all.
    fn purge_expired_batch(&self) -> StoreFuture<'_, StoreResult<PurgedBatch>> {
        StoreFuture::boxed(async move {
            let removed = self.purge_expired().await?;
            Ok(PurgedBatch {
                removed,
                more: false,
            })
        })
    }

    /// Removes what is recorded under a key, so the action may run again:
    /// for operators resolving an unknown outcome or a crashed holder.
    /// Returns whether anything was removed.
    ///
    /// With [`Forget::UnlessLive`], a completed record or a claim whose lease
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

    /// [`Records::forget_with`] with [`Forget::UnlessLive`]: never removes a
    /// claim whose action may be running.
    ///
    /// # Errors
    ///
    /// As [`Records::forget_with`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Records::forget_with`].
    fn forget<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<bool>> {
        self.forget_with(key, Forget::UnlessLive)
    }

    /// Resolves a key whose outcome is unknown, once the operator has asked
    /// the provider what happened: [`Resolution::Applied`] makes the record
    /// `done` with the provider's result, so every later call replays it;
    /// [`Resolution::NotApplied`] removes it, so the next call acts.
    ///
    /// Only a record in state `unknown`, or a claim whose lease ran out (its
    /// holder stopped mid-action), is resolved, in one atomic step: the
    /// state is checked by the write itself. A resolved record keeps its
    /// expiry (the retention its claim was given) and its fence is bumped,
    /// so a holder that comes back late changes nothing
    /// ([`StoreError::LeaseLost`]).
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use idempotent_tools::call::{Call, Key};
    /// use idempotent_tools::records::{RecordState, Records, Resolution};
    /// use idempotent_tools::{Classify, Failure, MemoryStore};
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// enum RefundError {
    ///     #[error("the payment service did not answer")]
    ///     TimedOut,
    ///     #[error(transparent)]
    ///     Guard(#[from] idempotent_tools::Error),
    /// }
    ///
    /// impl Classify for RefundError {
    ///     fn failure(&self) -> Failure {
    ///         Failure::Unknown
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryStore::new());
    /// let key = Key::parse("run-7:refund:1182")?;
    /// let refund = || Call::new("shop::refund_order", key.clone()).store(&store);
    ///
    /// // The refund went out, then its answer was lost: nobody knows.
    /// let lost = refund()
    ///     .run_classified(async { Err::<String, _>(RefundError::TimedOut) })
    ///     .await;
    /// assert!(lost.is_err());
    /// let record = store.inspect(&key).await?.expect("a record");
    /// assert_eq!(record.state, RecordState::Unknown);
    ///
    /// // The provider's records show refund re_1 under this key.
    /// store.resolve(&key, Resolution::applied("re_1".to_string())).await?;
    /// let again = refund()
    ///     .run_classified(async { Ok::<_, RefundError>("re_2".to_string()) })
    ///     .await?;
    /// assert!(again.is_replay());
    /// assert_eq!(again.value().map(String::as_str), Some("re_1"));
    /// # Ok(()) }
    /// ```
    ///
    /// The keys to resolve are those [`RecordQuery::pending`] lists, with
    /// why each is unknown ([`Record::why`], [`Record::last_error`]).
    ///
    /// The value of an applied resolution is what every later call
    /// replays, so it must read as the tool's result type: give it typed
    /// ([`Resolution::applied`]), or as JSON checked against the type
    /// before anything is written ([`Resolution::applied_json`]).
    /// [`Resolution::Applied`] with a bare [`RecordValue`] is not checked
    /// (the command-line tool, which cannot know the type, checks that it
    /// is JSON).
    ///
    /// # Errors
    ///
    /// [`StoreError::LiveClaim`] for a claim whose lease is live (its action
    /// may be running now); [`StoreError::NoRecord`] for a key with no
    /// record (or one past its retention); [`StoreError::NotUnknown`] for a
    /// record that is `done` or `failed`; [`StoreError::Unrecordable`] for
    /// an applied value that does not store as JSON, before any I/O;
    /// [`StoreError::Unavailable`] if the store cannot be reached. Nothing
    /// is changed by any of them. A store written outside this library
    /// that does not implement it answers [`StoreError::Unsupported`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the record is resolved or not.
    fn resolve<'a>(&'a self, key: &'a Key, how: Resolution) -> StoreFuture<'a, StoreResult<()>> {
        let _ = (key, how);
        StoreFuture::ready(Err(StoreError::Unsupported("resolve")))
    }

    /// Lists records matching `query`, one page at a time, in the order of
    /// their keys' text. For operators; the guard never calls it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] if the store cannot be reached;
    /// [`StoreError::Corrupt`] for a record it cannot read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>>;

    /// Reads one key's record in full, if there is one.
    ///
    /// # Errors
    ///
    /// As [`Records::list`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>>;

    /// Counts records by tool and state, in the order of tool, then state.
    ///
    /// # Errors
    ///
    /// As [`Records::list`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>>;
}

/// Which records to list, and which page of them.
///
/// Records come in the order of their keys' text; a page ends where the
/// next begins ([`RecordPage::next`]). Every filter left `None` matches
/// everything.
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools::records::{RecordQuery, RecordState};
///
/// let stuck = RecordQuery::new()
///     .state(RecordState::Unknown)
///     .tool("shop::refund_order")
///     .older_than(Duration::from_secs(3600))
///     .limit(50);
/// assert_eq!(stuck.limit, 50);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordQuery {
    /// Only records in this state.
    pub state: Option<RecordState>,
    /// Only records of this tool (its full id, such as `shop::refund_order`).
    pub tool: Option<String>,
    /// Only records of this run: keys whose run, the text up to the first
    /// `:` (the whole text if there is none), is this, as keys written from a
    /// template that starts with `<run>:` name their run. `run-7` matches
    /// `run-7:refund:1182`, never `run-70:refund:1182`.
    pub run: Option<String>,
    /// Only records whose key's text begins with this: a search by the
    /// start of a key (`run-7` matches `run-7:...` and `run-70:...` alike).
    pub key_prefix: Option<String>,
    /// Only records that last changed longer ago than this: finished that
    /// long ago, or held by a claim whose lease ran out that long ago (a
    /// claim whose lease is live never matches).
    pub older_than: Option<Duration>,
    /// Only records whose key's text sorts after this one: the previous
    /// page's [`RecordPage::next`].
    pub after: Option<String>,
    /// At most this many records (at least 1, at most [`MAX_PAGE`]).
    pub limit: usize,
}

impl Default for RecordQuery {
    fn default() -> Self {
        RecordQuery::new()
    }
}

impl RecordQuery {
    /// Every record, first page of [`DEFAULT_PAGE`].
    pub fn new() -> RecordQuery {
        RecordQuery {
            state: None,
            tool: None,
            run: None,
            key_prefix: None,
            older_than: None,
            after: None,
            limit: DEFAULT_PAGE,
        }
    }

    /// The records an operator has to resolve ([`Records::resolve`]): every
    /// outcome that is unknown, whether the action failed in a way that may
    /// have taken effect, the provider contradicted the ask, or a holder
    /// stopped mid-action. [`Record::why`] says which. The same as
    /// `RecordQuery::new().state(RecordState::Unknown)`, and narrowed the
    /// same way (`tool`, `run`, `older_than`, the paging).
    ///
    /// ```
    /// use idempotent_tools::records::{RecordQuery, RecordState};
    ///
    /// let pending = RecordQuery::pending().tool("shop::refund_order");
    /// assert_eq!(pending.state, Some(RecordState::Unknown));
    /// ```
    pub fn pending() -> RecordQuery {
        RecordQuery::new().state(RecordState::Unknown)
    }

    /// Only records in `state`.
    pub fn state(mut self, state: RecordState) -> RecordQuery {
        self.state = Some(state);
        self
    }

    /// Only records of `tool`.
    pub fn tool(mut self, tool: impl Into<String>) -> RecordQuery {
        self.tool = Some(tool.into());
        self
    }

    /// Only records of `run`: keys whose text up to the first `:` is `run`.
    pub fn run(mut self, run: impl Into<String>) -> RecordQuery {
        self.run = Some(run.into());
        self
    }

    /// Only records whose key's text begins with `prefix`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> RecordQuery {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Only records that last changed longer ago than `age`.
    pub fn older_than(mut self, age: Duration) -> RecordQuery {
        self.older_than = Some(age);
        self
    }

    /// The page after the one that ended with `next`.
    pub fn after(mut self, next: impl Into<String>) -> RecordQuery {
        self.after = Some(next.into());
        self
    }

    /// At most `limit` records per page (clamped to 1..=[`MAX_PAGE`]).
    pub fn limit(mut self, limit: usize) -> RecordQuery {
        self.limit = limit;
        self
    }

    /// The page size a store uses: the limit, clamped.
    pub fn page_size(&self) -> usize {
        self.limit.clamp(1, MAX_PAGE)
    }

    /// Whether a record passes the filters (not the paging), `now` being the
    /// time to measure ages from. For stores that filter in memory.
    pub fn matches(&self, record: &Record, now: SystemTime) -> bool {
        if self.state.is_some_and(|s| s != record.state) {
            return false;
        }
        if self
            .tool
            .as_deref()
            .is_some_and(|t| t != record.tool.as_str())
        {
            return false;
        }
        let key = record.key.as_str();
        if self.run.as_deref().is_some_and(|run| run_of(key) != run) {
            return false;
        }
        if self
            .key_prefix
            .as_deref()
            .is_some_and(|prefix| !key.starts_with(prefix))
        {
            return false;
        }
        if let Some(age) = self.older_than {
            let Some(changed) = record.completed_at.or(record.lease_until) else {
                return false;
            };
            if now
                .duration_since(changed)
                .map_or(true, |since| since <= age)
            {
                return false;
            }
        }
        true
    }
}

/// A key's run: its text up to the first `:`, or all of it without one.
fn run_of(key: &str) -> &str {
    key.split_once(':').map_or(key, |(run, _)| run)
}

/// One page of records.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordPage {
    /// The records, in the order of their keys' text.
    pub records: Vec<Record>,
    /// Where the next page starts ([`RecordQuery::after`]), or `None` if
    /// this is the last.
    pub next: Option<String>,
}

impl RecordPage {
    /// A page of `records`, fetched with one more than the page size asked
    /// for so that whether another page follows is known.
    pub(crate) fn from_overfetch(mut records: Vec<Record>, page_size: usize) -> RecordPage {
        let more = records.len() > page_size;
        records.truncate(page_size);
        let next = if more {
            records.last().map(|r| r.key.as_str().to_owned())
        } else {
            None
        };
        RecordPage { records, next }
    }
}

/// What [`Records::forget_with`] may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Forget {
    /// A completed record, or a held claim whose lease ran out (its holder
    /// stopped). A claim whose lease is live is refused with
    /// [`StoreError::LiveClaim`](crate::store::StoreError::LiveClaim): its action
    /// may be running right now.
    #[default]
    UnlessLive,
    /// Anything under the key, a live claim too. Its holder's completion
    /// then changes nothing and reports the claim lost; its waiters wake and
    /// claim again, so the action may run a second time. For a holder known
    /// to be gone whose lease has not yet run out.
    Force,
}
