//! The memory store's steps, each one entry operation under one shard's
//! lock, with no lock held across an `.await`.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use dashmap::mapref::entry::Entry;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Done, Held, Inner, Slot, SlotKey};
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::outcome::ConflictReason;
use crate::store::record::Completion;
use crate::store::record::RecordState;
use crate::tool::ToolId;
use crate::{
    store::records::{Forget, Resolution},
    store::{Claim, ClaimAnswer, ClaimRequest, StoreError, StoreResult, Wait},
};

impl Inner {
    fn new_claim(&self, req: &ClaimRequest<'_>, fence: u64) -> (Held, Claim) {
        let owner = self.owners.fetch_add(1, Ordering::Relaxed);
        let held = Held {
            owner,
            fence,
            tool: req.tool.clone(),
            fingerprint: req.fingerprint,
            wake: None,
        };
        let claim = Claim {
            key: req.key.clone(),
            owner: u128::from(owner),
            fence,
            taken_over: false,
            retention: req.retention,
        };
        (held, claim)
    }

    /// Answers a replay by the key's text under the shard's read lock, so
    /// that concurrent repeats of a finished action do not queue behind
    /// each other: no key is allocated to ask, and the record is lent to
    /// `replay` where it lies, not cloned out.
    pub(super) fn replay_now(
        &self,
        key: &str,
        tool: &ToolId,
        fingerprint: Fingerprint,
        replay: &mut dyn FnMut(&Completion),
    ) {
        let Some(slot) = self.slots.get(key.as_bytes()) else {
            return;
        };
        if let Slot::Done(done) = &*slot
            && done.tool == *tool
            && done.fingerprint == fingerprint
            && done.expires_at > Instant::now()
        {
            replay(&done.finished);
        }
    }

    /// Claims under the shard's write lock. The guard asks
    /// [`Inner::replay_now`] first, so a claim is one entry operation.
    pub(super) fn claim_now(&self, req: &ClaimRequest<'_>) -> ClaimAnswer {
        let (state, inserted) = match self.slots.entry(SlotKey(req.key.clone())) {
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
                            first: (done.finished.state == RecordState::Done)
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

    pub(super) fn complete_now(&self, claim: &Claim, finished: Completion) -> StoreResult<()> {
        let Some(mut slot) = self.slots.get_mut(claim.key.as_bytes()) else {
            return Err(StoreError::LeaseLost);
        };
        let held = match &*slot {
            Slot::Held(held) if held.is(claim) => held,
            // The same holder completing again: what it recorded stands.
            Slot::Done(done) if done.is(claim) => return Ok(()),
            _ => return Err(StoreError::LeaseLost),
        };
        let done = Done {
            owner: held.owner,
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

    pub(super) fn release_now(&self, claim: &Claim) -> StoreResult<()> {
        let removed = self.slots.remove_if(
            claim.key.as_bytes(),
            |_, slot| matches!(slot, Slot::Held(held) if held.is(claim)),
        );
        match removed {
            Some((_, Slot::Held(held))) => {
                held.wake();
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    /// Removes a completed record, or a held claim when forced. Here a held
    /// claim's lease is always live: its holder is in this process.
    pub(super) fn forget_now(&self, key: &Key, how: Forget) -> StoreResult<bool> {
        let force = how == Forget::Force;
        let removed = self.slots.remove_if(key.as_bytes(), |_, slot| {
            force || matches!(slot, Slot::Done(_))
        });
        match removed {
            Some((_, Slot::Held(held))) => {
                held.wake();
                Ok(true)
            }
            Some(_) => Ok(true),
            None if self.slots.contains_key(key.as_bytes()) => Err(StoreError::LiveClaim {
                key: key.as_str().to_owned(),
            }),
            None => Ok(false),
        }
    }

    /// Resolves an unknown outcome under the shard's lock. Here a held
    /// claim's lease is always live: its holder is in this process.
    pub(super) fn resolve_now(&self, key: &Key, how: Resolution) -> StoreResult<()> {
        let Entry::Occupied(mut occupied) = self.slots.entry(SlotKey(key.clone())) else {
            return Err(StoreError::NoRecord {
                key: key.as_str().to_owned(),
            });
        };
        let done = match occupied.get_mut() {
            Slot::Held(_) => {
                return Err(StoreError::LiveClaim {
                    key: key.as_str().to_owned(),
                });
            }
            Slot::Done(done) if done.expires_at <= Instant::now() => {
                return Err(StoreError::NoRecord {
                    key: key.as_str().to_owned(),
                });
            }
            Slot::Done(done) if done.finished.state != RecordState::Unknown => {
                return Err(StoreError::NotUnknown {
                    key: key.as_str().to_owned(),
                    state: done.finished.state,
                });
            }
            Slot::Done(done) => done,
        };
        match how {
            Resolution::Applied(value) => {
                done.finished = Completion {
                    state: RecordState::Done,
                    value,
                    completed_at: SystemTime::now(),
                };
                // The holder that completed it can no longer complete again.
                done.fence += 1;
            }
            Resolution::NotApplied => {
                occupied.remove();
            }
        }
        Ok(())
    }
}
