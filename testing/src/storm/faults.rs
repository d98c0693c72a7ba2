//! The store a storm puts between the tool and the store under test: it
//! injects each ask's trouble into the step it names, tells the storm when
//! that step is reached (so a caller is dropped at a chosen point, without
//! sleeps), swallows a vanished holder's steps, and remembers each key's
//! holder so that the storm can read the key back afterwards.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use idempotent_tools::call::{Fingerprint, Key, ToolId};
use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreError, StoreFuture, StoreResult,
};

use super::schedule::{Step, Trouble};

/// A trouble waiting for its step.
pub(super) struct Armed {
    pub(super) id: usize,
    /// The object whose key it waits for: the key's text contains it.
    pub(super) object: String,
    pub(super) trouble: Trouble,
    /// Notified when the step is reached.
    pub(super) reached: Arc<Notify>,
    /// Lets a held-back step go on, once its caller was dropped.
    pub(super) let_go: Arc<Notify>,
    /// Notified once the ask's claim is answered, or held back.
    pub(super) claimed: Arc<Notify>,
    /// Whether the ask's claim was seen: the first claim of the key after
    /// the trouble was armed (the storm lets no other ask of the object run
    /// until then).
    pub(super) seen: bool,
    /// The owner of the claim the ask won: later steps are matched by it.
    pub(super) owner: Option<u128>,
}

/// A trouble taken for its step.
struct Taken {
    trouble: Trouble,
    reached: Arc<Notify>,
    let_go: Arc<Notify>,
}

/// What a key's last claim asked with, to claim it again afterwards.
#[derive(Clone)]
pub(super) struct Asked {
    pub(super) key: Key,
    pub(super) tool: ToolId,
    pub(super) fingerprint: Fingerprint,
    pub(super) lease: Duration,
    pub(super) retention: Duration,
}

/// The storm's store, around the store under test.
pub(super) struct Troubled {
    pub(super) inner: Arc<dyn Store>,
    /// How long a stalled step stalls.
    stall: Duration,
    /// The most a paused completion waits for another caller to take its
    /// claim over.
    pause: Duration,
    /// How many claims each key has had answered `Claimed`, and a wake-up
    /// for each: a paused completion waits for its key's count to move.
    claimed: Mutex<HashMap<String, u64>>,
    claimed_again: Notify,
    armed: Mutex<Vec<Armed>>,
    vanished: Mutex<HashSet<u128>>,
    asked: Mutex<HashMap<String, Asked>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every statement under these locks leaves the data whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn taken(armed: Armed) -> Taken {
    Taken {
        trouble: armed.trouble,
        reached: armed.reached,
        let_go: armed.let_go,
    }
}

fn unavailable() -> StoreError {
    StoreError::Unavailable("the storm made this step fail".into())
}

impl Troubled {
    pub(super) fn new(inner: Arc<dyn Store>, stall: Duration, pause: Duration) -> Troubled {
        Troubled {
            inner,
            stall,
            pause,
            armed: Mutex::new(Vec::new()),
            vanished: Mutex::new(HashSet::new()),
            asked: Mutex::new(HashMap::new()),
            claimed: Mutex::new(HashMap::new()),
            claimed_again: Notify::new(),
        }
    }

    fn claims_of(&self, key: &Key) -> u64 {
        lock(&self.claimed).get(key.as_str()).copied().unwrap_or(0)
    }

    /// Holds a completion until another caller has claimed its key (a
    /// takeover, once the lease ran out), or for `pause` at most: the
    /// stale completion then lands after the takeover on every run, not
    /// only when the timing happens to allow it.
    async fn paused(&self, claim: &Claim) {
        let before = self.claims_of(&claim.key);
        let deadline = tokio::time::sleep(self.pause);
        tokio::pin!(deadline);
        loop {
            let again = self.claimed_again.notified();
            tokio::pin!(again);
            again.as_mut().enable();
            if self.claims_of(&claim.key) != before {
                return;
            }
            tokio::select! {
                () = &mut deadline => return,
                () = again => {}
            }
        }
    }

    pub(super) fn arm(&self, armed: Armed) {
        lock(&self.armed).push(armed);
    }

    /// Takes back a trouble its ask never reached.
    pub(super) fn disarm(&self, id: usize) {
        lock(&self.armed).retain(|armed| armed.id != id);
    }

    /// Every key claimed, with what its last holder asked.
    pub(super) fn asked(&self) -> Vec<Asked> {
        lock(&self.asked).values().cloned().collect()
    }

    /// The trouble of the ask whose claim this is: the first armed for
    /// `key` and not yet seen. Marks it seen; takes it out if `now` accepts
    /// it, and returns its id and the notice of its claim.
    fn claiming(
        &self,
        key: &Key,
        now: impl Fn(Trouble) -> bool,
    ) -> Option<(usize, Arc<Notify>, Option<Taken>)> {
        let mut armed = lock(&self.armed);
        let at = armed
            .iter()
            .position(|a| !a.seen && key.as_str().contains(a.object.as_str()))?;
        armed[at].seen = true;
        let (id, claimed) = (armed[at].id, Arc::clone(&armed[at].claimed));
        if !now(armed[at].trouble) {
            return Some((id, claimed, None));
        }
        let a = armed.remove(at);
        Some((id, claimed, Some(taken(a))))
    }

    /// After the ask `id`'s claim was answered: binds its trouble to the
    /// claim's owner, or drops it if the claim was not won; takes it out if
    /// `now` accepts it.
    fn answered(
        &self,
        id: usize,
        owner: Option<u128>,
        now: impl Fn(Trouble) -> bool,
    ) -> Option<Taken> {
        let mut armed = lock(&self.armed);
        let at = armed.iter().position(|a| a.id == id)?;
        match owner {
            Some(owner) if !now(armed[at].trouble) => {
                armed[at].owner = Some(owner);
                None
            }
            Some(_) => Some(taken(armed.remove(at))),
            None => {
                armed.remove(at);
                None
            }
        }
    }

    /// The trouble bound to this claim's owner that `wanted` accepts, taken.
    fn take(&self, claim: &Claim, wanted: impl Fn(Trouble) -> bool) -> Option<Taken> {
        let mut armed = lock(&self.armed);
        let at = armed
            .iter()
            .position(|a| a.owner == Some(claim.owner) && wanted(a.trouble))?;
        Some(taken(armed.remove(at)))
    }

    fn vanished(&self, claim: &Claim) -> bool {
        lock(&self.vanished).contains(&claim.owner)
    }

    /// The trouble, if any, of a step other than a claim.
    async fn troubled(&self, claim: &Claim, step: Step) -> StoreResult<()> {
        let taken = self.take(claim, |t| match t {
            Trouble::Fails(s) | Trouble::Stalls(s) => s == step,
            Trouble::DroppedDuringCompletion | Trouble::PausedPastLease => step == Step::Complete,
            _ => false,
        });
        let Some(taken) = taken else {
            return Ok(());
        };
        match taken.trouble {
            Trouble::Fails(_) => Err(unavailable()),
            Trouble::Stalls(_) => {
                tokio::time::sleep(self.stall).await;
                Ok(())
            }
            Trouble::PausedPastLease => {
                self.paused(claim).await;
                Ok(())
            }
            _ => {
                taken.reached.notify_one();
                taken.let_go.notified().await;
                Ok(())
            }
        }
    }
}

impl Store for Troubled {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        StoreFuture::boxed(async move {
            let mine = self.claiming(req.key, |t| {
                matches!(
                    t,
                    Trouble::Fails(Step::Claim)
                        | Trouble::Stalls(Step::Claim)
                        | Trouble::AnswersLate(Step::Claim)
                        | Trouble::DroppedBeforeClaimAnswer
                )
            });
            let (id, claimed, before) = match mine {
                Some((id, claimed, before)) => (Some(id), Some(claimed), before),
                None => (None, None, None),
            };
            let mut late = None;
            if let Some(taken) = before {
                match taken.trouble {
                    Trouble::Fails(_) => {
                        if let Some(claimed) = &claimed {
                            claimed.notify_one();
                        }
                        return Err(unavailable());
                    }
                    Trouble::Stalls(_) => tokio::time::sleep(self.stall).await,
                    Trouble::AnswersLate(_) => late = Some(taken),
                    _ => {
                        if let Some(claimed) = &claimed {
                            claimed.notify_one();
                        }
                        taken.reached.notify_one();
                        taken.let_go.notified().await;
                    }
                }
            }
            let answer = self.inner.claim(req).await;
            let owner = match &answer {
                Ok(ClaimAnswer::Claimed(claim)) => {
                    *lock(&self.claimed)
                        .entry(req.key.as_str().to_owned())
                        .or_default() += 1;
                    self.claimed_again.notify_waiters();
                    lock(&self.asked).insert(
                        req.key.as_str().to_owned(),
                        Asked {
                            key: req.key.clone(),
                            tool: req.tool.clone(),
                            fingerprint: req.fingerprint,
                            lease: req.lease,
                            retention: req.retention,
                        },
                    );
                    Some(claim.owner)
                }
                _ => None,
            };
            if let Some(id) = id {
                let acting = self.answered(id, owner, |t| {
                    matches!(t, Trouble::DroppedDuringAction | Trouble::Vanishes)
                });
                if let (Some(taken), Some(owner)) = (acting, owner) {
                    if taken.trouble == Trouble::Vanishes {
                        lock(&self.vanished).insert(owner);
                    }
                    taken.reached.notify_one();
                }
            }
            if let Some(claimed) = &claimed {
                claimed.notify_one();
            }
            if let Some(taken) = late {
                taken.reached.notify_one();
                taken.let_go.notified().await;
            }
            answer
        })
    }

    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move {
            if self.vanished(claim) {
                return Ok(());
            }
            let late = self.take(claim, |t| t == Trouble::AnswersLate(Step::Complete));
            self.troubled(claim, Step::Complete).await?;
            let done = self.inner.complete(claim, finished).await;
            if let Some(taken) = late {
                taken.reached.notify_one();
                taken.let_go.notified().await;
            }
            done
        })
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move {
            if self.vanished(claim) {
                return Ok(());
            }
            self.troubled(claim, Step::Release).await?;
            self.inner.release(claim).await
        })
    }

    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move {
            if self.vanished(claim) {
                return Ok(());
            }
            self.troubled(claim, Step::Renew).await?;
            self.inner.renew(claim, lease).await
        })
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        self.inner.renew_every(lease)
    }
}
