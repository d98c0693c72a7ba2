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
    /// How long a paused completion waits: past the lease.
    pause: Duration,
    armed: Mutex<Vec<Armed>>,
    vanished: Mutex<HashSet<u128>>,
    asked: Mutex<HashMap<String, Asked>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every statement under these locks leaves the data whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// The first trouble armed for `key` that `wanted` accepts, taken.
    fn take(
        &self,
        key: &Key,
        wanted: impl Fn(Trouble) -> bool,
    ) -> Option<(Trouble, Arc<Notify>, Arc<Notify>)> {
        let mut armed = lock(&self.armed);
        let at = armed
            .iter()
            .position(|a| wanted(a.trouble) && key.as_str().contains(a.object.as_str()))?;
        let a = armed.remove(at);
        Some((a.trouble, a.reached, a.let_go))
    }

    fn vanished(&self, claim: &Claim) -> bool {
        lock(&self.vanished).contains(&claim.owner)
    }

    /// The trouble, if any, of a step other than a claim.
    async fn troubled(&self, key: &Key, step: Step) -> StoreResult<()> {
        let taken = self.take(key, |t| match t {
            Trouble::Fails(s) | Trouble::Stalls(s) => s == step,
            Trouble::DroppedDuringCompletion | Trouble::PausedPastLease => step == Step::Complete,
            _ => false,
        });
        match taken {
            Some((Trouble::Fails(_), _, _)) => Err(unavailable()),
            Some((Trouble::Stalls(_), _, _)) => {
                tokio::time::sleep(self.stall).await;
                Ok(())
            }
            Some((Trouble::PausedPastLease, _, _)) => {
                tokio::time::sleep(self.pause).await;
                Ok(())
            }
            Some((_, reached, let_go)) => {
                reached.notify_one();
                let_go.notified().await;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Store for Troubled {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        StoreFuture::boxed(async move {
            let before = self.take(req.key, |t| {
                matches!(
                    t,
                    Trouble::Fails(Step::Claim)
                        | Trouble::Stalls(Step::Claim)
                        | Trouble::AnswersLate(Step::Claim)
                        | Trouble::DroppedBeforeClaimAnswer
                )
            });
            let mut late = None;
            match before {
                Some((Trouble::Fails(_), _, _)) => return Err(unavailable()),
                Some((Trouble::Stalls(_), _, _)) => tokio::time::sleep(self.stall).await,
                Some((Trouble::AnswersLate(_), reached, let_go)) => late = Some((reached, let_go)),
                Some((_, reached, let_go)) => {
                    reached.notify_one();
                    let_go.notified().await;
                }
                None => {}
            }
            let answer = self.inner.claim(req).await;
            if let Ok(ClaimAnswer::Claimed(claim)) = &answer {
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
                let acting = self.take(req.key, |t| {
                    matches!(t, Trouble::DroppedDuringAction | Trouble::Vanishes)
                });
                if let Some((trouble, reached, _)) = acting {
                    if trouble == Trouble::Vanishes {
                        lock(&self.vanished).insert(claim.owner);
                    }
                    reached.notify_one();
                }
            }
            if let Some((reached, let_go)) = late {
                reached.notify_one();
                let_go.notified().await;
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
            let late = self.take(&claim.key, |t| t == Trouble::AnswersLate(Step::Complete));
            self.troubled(&claim.key, Step::Complete).await?;
            let done = self.inner.complete(claim, finished).await;
            if let Some((_, reached, let_go)) = late {
                reached.notify_one();
                let_go.notified().await;
            }
            done
        })
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move {
            if self.vanished(claim) {
                return Ok(());
            }
            self.troubled(&claim.key, Step::Release).await?;
            self.inner.release(claim).await
        })
    }

    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move {
            if self.vanished(claim) {
                return Ok(());
            }
            self.troubled(&claim.key, Step::Renew).await?;
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
