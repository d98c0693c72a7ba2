//! Sweeping expired records: as new keys arrive (each sweep paid for by as
//! many inserts as there were records), and on a timer, so they go when
//! traffic stops too.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use super::{Inner, MIN_SWEEP_INTERVAL, MemoryStore, Slot};

impl MemoryStore {
    /// Starts the sweeper if none is alive and a runtime is there to run it.
    pub(super) fn ensure_sweeper(&self) {
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
    pub(super) fn sweep(&self) -> u64 {
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

    pub(super) fn note_insert(&self) {
        let inserted = self.inserted_since_sweep.fetch_add(1, Ordering::Relaxed) + 1;
        if inserted >= self.sweep_after.load(Ordering::Relaxed) {
            self.sweep();
        }
    }
}
