//! The in-memory store: the default, for one process, with no set-up.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use foldhash::fast::RandomState;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    Claim, ClaimAnswer, ClaimRequest, Forget, Record, RecordCount, RecordPage, RecordQuery,
    RecordState, Store, StoreError, StoreFuture, StoreResult, Wait,
};
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::outcome::ConflictReason;
use crate::record::{Ending, Finished};
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
    fn replay_now(&self, req: &ClaimRequest<'_>) -> Option<ClaimAnswer> {
        let slot = self.slots.get(req.key)?;
        match &*slot {
            Slot::Done(done)
                if done.tool == *req.tool
                    && done.fingerprint == req.fingerprint
                    && done.expires_at > Instant::now() =>
            {
                Some(ClaimAnswer::Completed(done.finished.clone()))
            }
            _ => None,
        }
    }

    fn claim_now(&self, req: &ClaimRequest<'_>) -> ClaimAnswer {
        if let Some(replay) = self.replay_now(req) {
            return replay;
        }
        let (state, inserted) = match self.slots.entry(req.key.clone()) {
            Entry::Vacant(vacant) => {
                let (held, claim) = self.new_claim(req, 1);
                vacant.insert(Slot::Held(held));
                (ClaimAnswer::Claimed(claim), true)
            }
            Entry::Occupied(mut occupied) => {
                let slot = occupied.get_mut();
                let state = match slot {
                    Slot::Done(done) if done.expires_at <= Instant::now() => {
                        let (held, claim) = self.new_claim(req, done.fence + 1);
                        *slot = Slot::Held(held);
                        ClaimAnswer::Claimed(claim)
                    }
                    Slot::Done(done) if done.tool != *req.tool => ClaimAnswer::Conflict {
                        reason: ConflictReason::OtherTool,
                        first: None,
                    },
                    Slot::Done(done) if done.fingerprint != req.fingerprint => {
                        ClaimAnswer::Conflict {
                            reason: ConflictReason::Arguments,
                            first: (done.finished.ending == Ending::Ok)
                                .then(|| done.finished.value.clone()),
                        }
                    }
                    Slot::Done(done) => ClaimAnswer::Completed(done.finished.clone()),
                    Slot::Held(held) if held.tool != *req.tool => ClaimAnswer::Conflict {
                        reason: ConflictReason::OtherTool,
                        first: None,
                    },
                    Slot::Held(held) if held.fingerprint != req.fingerprint => {
                        ClaimAnswer::Conflict {
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
                        ClaimAnswer::InFlight(Wait::new(async move {
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

    /// Removes a finished record, or a held claim when forced. Here a held
    /// claim's lease is always live: its holder is in this process.
    fn forget_now(&self, key: &Key, how: Forget) -> StoreResult<bool> {
        let force = how == Forget::Force;
        let removed = self
            .slots
            .remove_if(key, |_, slot| force || matches!(slot, Slot::Done(_)));
        match removed {
            Some((_, Slot::Held(held))) => {
                held.wake();
                Ok(true)
            }
            Some(_) => Ok(true),
            None if self.slots.contains_key(key) => Err(StoreError::LiveClaim {
                key: key.as_str().to_owned(),
            }),
            None => Ok(false),
        }
    }

    /// A slot as an operator reads it; `now` and `wall` are the same moment
    /// on the two clocks, to turn expiry instants into times.
    fn record(key: &Key, slot: &Slot, now: Instant, wall: SystemTime) -> Record {
        let at = |instant: Instant| match instant.checked_duration_since(now) {
            Some(ahead) => wall.checked_add(ahead),
            None => wall.checked_sub(now.saturating_duration_since(instant)),
        };
        match slot {
            Slot::Held(held) => Record {
                key: key.clone(),
                tool: held.tool.clone(),
                state: RecordState::Held,
                fence: held.fence,
                taken_over: false,
                owner: Some(held.owner),
                lease_until: None,
                result: None,
                finished_at: None,
                expires_at: None,
            },
            Slot::Done(done) => Record {
                key: key.clone(),
                tool: done.tool.clone(),
                state: RecordState::of_ending(done.finished.ending),
                fence: done.fence,
                taken_over: false,
                owner: None,
                lease_until: None,
                result: Some(done.finished.value.clone()),
                finished_at: Some(done.finished.finished_at),
                expires_at: at(done.expires_at),
            },
        }
    }

    fn list_now(&self, query: &RecordQuery) -> RecordPage {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let page = query.page_size();
        // One shard at a time, never two locks at once; sorted afterwards.
        let mut found: Vec<Record> = self
            .slots
            .iter()
            .filter(|entry| {
                query
                    .after
                    .as_deref()
                    .is_none_or(|after| entry.key().as_str() > after)
            })
            .map(|entry| Inner::record(entry.key(), entry.value(), now, wall))
            .filter(|record| query.matches(record, wall))
            .collect();
        found.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        found.truncate(page + 1);
        RecordPage::from_overfetch(found, page)
    }

    fn count_now(&self) -> Vec<RecordCount> {
        let mut counts = std::collections::BTreeMap::<(ToolId, RecordState), u64>::new();
        for entry in self.slots.iter() {
            let (tool, state) = match entry.value() {
                Slot::Held(held) => (&held.tool, RecordState::Held),
                Slot::Done(done) => (&done.tool, RecordState::of_ending(done.finished.ending)),
            };
            *counts.entry((tool.clone(), state)).or_default() += 1;
        }
        counts
            .into_iter()
            .map(|((tool, state), count)| RecordCount::new(tool, state, count))
            .collect()
    }
}

impl Store for MemoryStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        let state = self.inner.claim_now(&req);
        if matches!(state, ClaimAnswer::Claimed(_)) {
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

    fn renew<'a>(&'a self, claim: &'a Claim, _lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
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

    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        StoreFuture::ready(self.inner.forget_now(key, how))
    }

    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        StoreFuture::ready(Ok(self.inner.list_now(query)))
    }

    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let record = self
            .inner
            .slots
            .get(key)
            .map(|slot| Inner::record(key, &slot, now, wall));
        StoreFuture::ready(Ok(record))
    }

    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        StoreFuture::ready(Ok(self.inner.count_now()))
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}
