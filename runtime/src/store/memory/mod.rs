//! The in-memory store: the default, for one process, with no set-up.
//!
//! - this module: the store, its slots, and its `Store` methods;
//! - `steps`: claim, complete, release and forget under a shard's lock;
//! - `sweeper`: expired records removed as keys arrive and on a timer;
//! - `records`: what an operator reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use foldhash::fast::RandomState;
use tokio::sync::watch;
use tokio::time::Instant;

mod records;
mod steps;
mod sweeper;

use super::records::Resolution;
use super::{
    Claim, ClaimAnswer, ClaimRequest, Forget, Record, RecordCount, RecordPage, RecordQuery,
    Records, Store, StoreError, StoreFuture, StoreResult,
};
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::store::record::Completion;
use crate::tool::ToolId;

/// Sweeps run after this many new claims at the least.
const MIN_SWEEP_INTERVAL: usize = 1024;

/// How often a memory store's sweeper removes expired records, unless
/// [`MemoryStore::sweeping_every`] says otherwise.
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Claims and records in a sharded map, for one process.
///
/// - A claim is one entry operation under one shard's lock: there is no
///   global mutex, and no lock is held across an `.await`.
/// - Waiters on an in-flight key are woken by a per-key `watch` channel,
///   created only when the first waiter arrives, so an uncontended call
///   allocates none.
/// - Completed records expire after their retention. Expired records are
///   swept as new keys arrive (each sweep is paid for by as many inserts as
///   there were records), so memory stays bounded under a stream of unique
///   keys, and by one sweeper task per store every [`DEFAULT_SWEEP_EVERY`],
///   so they go when traffic stops too. A held claim is never swept.
/// - Leases do not expire here: a holder that panics or is dropped releases
///   its claim at once, and a crash takes the whole store with it. Use a
///   durable store to survive a crash.
///
/// ```
/// use std::sync::Arc;
/// use idempotent_tools::{MemoryStore, Outcome, Run, call::{Call, Key}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::Error> {
/// let store = Arc::new(MemoryStore::new());
/// let key = Key::builder().literal("run-1:refund:")?.part("order_id", "1182")?.finish()?;
/// let refund = || async { Ok::<_, idempotent_tools::Error>("re_1".to_string()) };
///
/// let first = Call::new("shop::refund", key.clone()).store(store.clone()).run(refund()).await?;
/// let again = Call::new("shop::refund", key).store(store).run(refund()).await?;
/// assert!(first.is_fresh());
/// assert!(again.is_replay());
/// # Ok(()) }
/// ```
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    slots: DashMap<SlotKey, Slot, RandomState>,
    owners: AtomicU64,
    inserted_since_sweep: AtomicUsize,
    sweep_after: AtomicUsize,
    /// How often the sweeper task runs.
    sweep_every: Duration,
    /// Whether a sweeper task is alive; cleared by the task as it ends, so
    /// the next insert starts another (a runtime that shut down takes its
    /// tasks with it).
    sweeping: AtomicBool,
}

/// A key as the map holds it: hashed, compared and looked up by its bytes,
/// which an inline [`Key`] reads with no UTF-8 check, where its text (and
/// so `Hash for Key`) would check them on every lookup. Private to the map,
/// so both sides of a lookup hash as `[u8]` does.
struct SlotKey(Key);

impl std::hash::Hash for SlotKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.as_bytes().hash(state);
    }
}

impl PartialEq for SlotKey {
    fn eq(&self, other: &SlotKey) -> bool {
        self.0.as_bytes() == other.0.as_bytes()
    }
}

impl Eq for SlotKey {}

impl std::borrow::Borrow<[u8]> for SlotKey {
    fn borrow(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

// A claim writes a whole entry into the map, and every record keeps one, so
// no slot wastes space: an owner is the store's `u64` count, where the
// `u128` a `Claim` carries would align the slot to 16 bytes (an entry of
// 176 bytes instead of 160).
struct Held {
    owner: u64,
    fence: u64,
    tool: ToolId,
    fingerprint: Fingerprint,
    wake: Option<watch::Sender<()>>,
}

struct Done {
    /// The holder that completed it: the same holder may complete again.
    owner: u64,
    fence: u64,
    tool: ToolId,
    fingerprint: Fingerprint,
    finished: Completion,
    expires_at: Instant,
}

enum Slot {
    Held(Held),
    Done(Done),
}

impl Done {
    /// Whether `claim` is the one that completed it.
    fn is(&self, claim: &Claim) -> bool {
        is_claim(self.owner, self.fence, claim)
    }
}

/// Whether `claim` is the one its holder took as `owner`, at `fence`.
fn is_claim(owner: u64, fence: u64, claim: &Claim) -> bool {
    u128::from(owner) == claim.owner && fence == claim.fence
}

impl Held {
    /// Whether `claim` is this one.
    fn is(&self, claim: &Claim) -> bool {
        is_claim(self.owner, self.fence, claim)
    }

    fn wake(&self) {
        if let Some(wake) = &self.wake {
            wake.send_replace(());
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store, sweeping expired records every
    /// [`DEFAULT_SWEEP_EVERY`].
    pub fn new() -> MemoryStore {
        MemoryStore::sweeping_every(DEFAULT_SWEEP_EVERY)
    }

    /// An empty store whose sweeper removes expired records every `every`
    /// (at least once a millisecond). The sweeper is one task per store,
    /// started with the first claim on a tokio runtime and ended with the
    /// store.
    pub fn sweeping_every(every: Duration) -> MemoryStore {
        MemoryStore {
            inner: Arc::new(Inner {
                slots: DashMap::with_hasher(RandomState::default()),
                owners: AtomicU64::new(1),
                inserted_since_sweep: AtomicUsize::new(0),
                sweep_after: AtomicUsize::new(MIN_SWEEP_INTERVAL),
                sweep_every: every.max(Duration::from_millis(1)),
                sweeping: AtomicBool::new(false),
            }),
        }
    }

    /// How many keys the store holds, claimed or finished.
    pub fn len(&self) -> usize {
        self.inner.slots.len()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.inner.slots.is_empty()
    }
}

impl Store for MemoryStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        StoreFuture::ready(Ok(self.claim_at_once(&req)))
    }

    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::ready(self.complete_at_once(claim, finished))
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::ready(self.release_at_once(claim))
    }

    fn renew<'a>(&'a self, claim: &'a Claim, _lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        let current = matches!(
            self.inner.slots.get(claim.key.as_bytes()).as_deref(),
            Some(Slot::Held(held)) if held.is(claim)
        );
        StoreFuture::ready(if current {
            Ok(())
        } else {
            Err(StoreError::LeaseLost)
        })
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

impl Records for MemoryStore {
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        StoreFuture::ready(Ok(self.inner.sweep()))
    }

    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        StoreFuture::ready(self.inner.forget_now(key, how))
    }

    fn resolve<'a>(&'a self, key: &'a Key, how: Resolution) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::ready(self.inner.resolve_now(key, how))
    }

    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        StoreFuture::ready(Ok(self.inner.list_now(query)))
    }

    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let record = self
            .inner
            .slots
            .get(key.as_bytes())
            .map(|slot| Inner::record(key, &slot, now, wall));
        StoreFuture::ready(Ok(record))
    }

    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        StoreFuture::ready(Ok(self.inner.count_now()))
    }
}

/// The guard's fast path, private to the crate: every step of this store
/// is ready at once, so the guard calls it inline, and a repeat of a
/// finished call reads the record where it lies.
impl MemoryStore {
    /// Hands `replay` the record of `key`'s finished action, if a claim
    /// would answer [`ClaimAnswer::Completed`] with it for this tool and
    /// fingerprint. The record is lent under the shard's read lock, so the
    /// guard reads the result out of it in place; not calling `replay` means
    /// the guard claims as usual.
    pub(crate) fn replay_at_once(
        &self,
        key: &str,
        tool: &ToolId,
        fingerprint: Fingerprint,
        replay: &mut dyn FnMut(&Completion),
    ) {
        self.inner.replay_now(key, tool, fingerprint, replay);
    }

    /// [`Store::claim`], answered at once: the guard calls it inline,
    /// with no future around the answer.
    pub(crate) fn claim_at_once(&self, req: &ClaimRequest<'_>) -> ClaimAnswer {
        let state = self.inner.claim_now(req);
        if matches!(state, ClaimAnswer::Claimed(_)) {
            self.ensure_sweeper();
        }
        state
    }

    /// [`Store::complete`], answered at once. It fails only with
    /// [`StoreError::LeaseLost`]: nothing here is unreachable, and a typed
    /// value is kept as it is.
    pub(crate) fn complete_at_once(&self, claim: &Claim, finished: Completion) -> StoreResult<()> {
        self.inner.complete_now(claim, finished)
    }

    /// [`Store::release`], answered at once. It fails only with
    /// [`StoreError::LeaseLost`].
    pub(crate) fn release_at_once(&self, claim: &Claim) -> StoreResult<()> {
        self.inner.release_now(claim)
    }
}

#[cfg(test)]
mod tests {
    use super::{Slot, SlotKey};

    /// What every claim writes and every record keeps.
    #[test]
    fn an_entry_is_160_bytes() {
        assert_eq!(std::mem::size_of::<(SlotKey, Slot)>(), 160);
    }
}
