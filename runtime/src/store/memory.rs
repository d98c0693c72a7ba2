//! The in-memory store: the default, for one process, with no set-up.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use foldhash::fast::RandomState;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Claim, ClaimRequest, ClaimState, Store, StoreError, StoreFuture, StoreResult, Wait};
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::outcome::ConflictReason;
use crate::record::{Ending, Finished, ToolId};

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
/// - Finished records expire after their retention. Expired records are
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
/// use idempotent_tools::{Call, Key, MemoryStore, Outcome, Run};
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
    slots: DashMap<Key, Slot, RandomState>,
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

struct Held {
    owner: u128,
    fence: u64,
    tool: ToolId,
    fingerprint: Fingerprint,
    wake: Option<watch::Sender<()>>,
}

struct Done {
    fence: u64,
    tool: ToolId,
    fingerprint: Fingerprint,
    finished: Finished,
    expires_at: Instant,
}

enum Slot {
    Held(Held),
    Done(Done),
}

impl Held {
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

    /// Whether a key is claimed and its action still running.
    pub fn is_held(&self, key: &Key) -> bool {
        matches!(self.inner.slots.get(key).as_deref(), Some(Slot::Held(_)))
    }

    /// Starts the sweeper if none is alive and a runtime is there to run it.
    fn ensure_sweeper(&self) {
        if self.inner.sweeping.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.inner.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let first = Instant::now() + self.inner.sweep_every;
        runtime.spawn(sweeper(Arc::downgrade(&self.inner), first));
    }
}

/// Sweeps a store on a timer, so records expire even when no call comes;
/// ends when the store is dropped (or its runtime shuts down).
async fn sweeper(store: Weak<Inner>, first: Instant) {
    struct Alive(Weak<Inner>);
    impl Drop for Alive {
        fn drop(&mut self) {
            if let Some(store) = self.0.upgrade() {
                store.sweeping.store(false, Ordering::Release);
            }
        }
    }
    let _alive = Alive(store.clone());
    let Some(every) = store.upgrade().map(|s| s.sweep_every) else {
        return;
    };
    // Timed from the spawn, not from the task's first poll.
    let mut ticks = tokio::time::interval_at(first, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match store.upgrade() {
            Some(store) => {
                store.sweep();
            }
            None => return,
        }
    }
}

impl Inner {
    fn new_claim(&self, req: &ClaimRequest<'_>, fence: u64) -> (Held, Claim) {
        let owner = u128::from(self.owners.fetch_add(1, Ordering::Relaxed));
        let held = Held {
            owner,
            fence,
            tool: req.tool.clone(),
            fingerprint: req.fingerprint,
            wake: None,
        };
        let claim = Claim {
            key: req.key.clone(),
            owner,
            fence,
            taken_over: false,
            retention: req.retention,
        };
        (held, claim)
    }

    fn sweep(&self) -> u64 {
        let now = Instant::now();
        let before = self.slots.len();
        self.slots
            .retain(|_, slot| !matches!(slot, Slot::Done(done) if done.expires_at <= now));
        let after = self.slots.len();
        self.sweep_after
            .store(after.max(MIN_SWEEP_INTERVAL), Ordering::Relaxed);
        self.inserted_since_sweep.store(0, Ordering::Relaxed);
        before.saturating_sub(after) as u64
    }

    fn note_insert(&self) {
        let inserted = self.inserted_since_sweep.fetch_add(1, Ordering::Relaxed) + 1;
        if inserted >= self.sweep_after.load(Ordering::Relaxed) {
            self.sweep();
        }
    }

    /// Answers a replay under the shard's read lock, so that concurrent
    /// repeats of a finished action do not queue behind each other.
    fn replay_now(&self, req: &ClaimRequest<'_>) -> Option<ClaimState> {
        let slot = self.slots.get(req.key)?;
        match &*slot {
            Slot::Done(done)
                if done.tool == *req.tool
                    && done.fingerprint == req.fingerprint
                    && done.expires_at > Instant::now() =>
            {
                Some(ClaimState::Completed(done.finished.clone()))
            }
            _ => None,
        }
    }

    fn claim_now(&self, req: &ClaimRequest<'_>) -> ClaimState {
        if let Some(replay) = self.replay_now(req) {
            return replay;
        }
        let (state, inserted) = match self.slots.entry(req.key.clone()) {
            Entry::Vacant(vacant) => {
                let (held, claim) = self.new_claim(req, 1);
                vacant.insert(Slot::Held(held));
                (ClaimState::Claimed(claim), true)
            }
            Entry::Occupied(mut occupied) => {
                let slot = occupied.get_mut();
                let state = match slot {
                    Slot::Done(done) if done.expires_at <= Instant::now() => {
                        let (held, claim) = self.new_claim(req, done.fence + 1);
                        *slot = Slot::Held(held);
                        ClaimState::Claimed(claim)
                    }
                    Slot::Done(done) if done.tool != *req.tool => ClaimState::Conflict {
                        reason: ConflictReason::OtherTool,
                        first: None,
                    },
                    Slot::Done(done) if done.fingerprint != req.fingerprint => {
                        ClaimState::Conflict {
                            reason: ConflictReason::Arguments,
                            first: (done.finished.ending == Ending::Ok)
                                .then(|| done.finished.value.clone()),
                        }
                    }
                    Slot::Done(done) => ClaimState::Completed(done.finished.clone()),
                    Slot::Held(held) if held.tool != *req.tool => ClaimState::Conflict {
                        reason: ConflictReason::OtherTool,
                        first: None,
                    },
                    Slot::Held(held) if held.fingerprint != req.fingerprint => {
                        ClaimState::Conflict {
                            reason: ConflictReason::Arguments,
                            first: None,
                        }
                    }
                    Slot::Held(held) => {
                        // Subscribing under the shard lock means a completion
                        // after this point is always seen.
                        let mut woken = held
                            .wake
                            .get_or_insert_with(|| watch::Sender::new(()))
                            .subscribe();
                        ClaimState::InFlight(Wait::new(async move {
                            let _ = woken.changed().await;
                        }))
                    }
                };
                (state, false)
            }
        };
        if inserted {
            self.note_insert();
        }
        state
    }

    fn complete_now(&self, claim: &Claim, finished: Finished) -> StoreResult<()> {
        let Some(mut slot) = self.slots.get_mut(&claim.key) else {
            return Err(StoreError::LeaseLost);
        };
        let Slot::Held(held) = &*slot else {
            return Err(StoreError::LeaseLost);
        };
        if held.owner != claim.owner || held.fence != claim.fence {
            return Err(StoreError::LeaseLost);
        }
        let done = Done {
            fence: held.fence,
            tool: held.tool.clone(),
            fingerprint: held.fingerprint,
            finished,
            expires_at: Instant::now() + claim.retention,
        };
        if let Slot::Held(held) = std::mem::replace(&mut *slot, Slot::Done(done)) {
            held.wake();
        }
        Ok(())
    }

    fn release_now(&self, claim: &Claim) -> StoreResult<()> {
        let removed = self.slots.remove_if(&claim.key, |_, slot| {
            matches!(slot, Slot::Held(held) if held.owner == claim.owner && held.fence == claim.fence)
        });
        match removed {
            Some((_, Slot::Held(held))) => {
                held.wake();
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    fn forget_now(&self, key: &Key) -> bool {
        self.slots
            .remove_if(key, |_, slot| matches!(slot, Slot::Done(_)))
            .is_some()
    }
}

impl Store for MemoryStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimState>> {
        let state = self.inner.claim_now(&req);
        if matches!(state, ClaimState::Claimed(_)) {
            self.ensure_sweeper();
        }
        StoreFuture::ready(Ok(state))
    }

    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Finished,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::ready(self.inner.complete_now(claim, finished))
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::ready(self.inner.release_now(claim))
    }

    fn extend<'a>(
        &'a self,
        claim: &'a Claim,
        _lease: Duration,
    ) -> StoreFuture<'a, StoreResult<()>> {
        let current = matches!(
            self.inner.slots.get(&claim.key).as_deref(),
            Some(Slot::Held(held)) if held.owner == claim.owner && held.fence == claim.fence
        );
        StoreFuture::ready(if current {
            Ok(())
        } else {
            Err(StoreError::LeaseLost)
        })
    }

    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        StoreFuture::ready(Ok(self.inner.sweep()))
    }

    fn answers_at_once(&self) -> bool {
        true
    }

    fn forget<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<bool>> {
        StoreFuture::ready(Ok(self.inner.forget_now(key)))
    }
}
