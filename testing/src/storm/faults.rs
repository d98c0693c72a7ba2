//! The store a storm puts between the tool and the store under test: each
//! caller gets a handle of its own on it, so every step is known to be that
//! caller's. It injects each ask's trouble into the step it names, tells
//! the storm when that step is reached (so a caller is dropped at a chosen
//! point, without sleeps), has the stand-in provider lose a holder's call
//! at a chosen moment of its action, swallows a vanished holder's steps,
//! and remembers each key's holder so that the storm can read the key back
//! afterwards.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use idempotent_tools::call::{Fingerprint, Key, ToolId};
use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreError, StoreResult,
};

use super::schedule::{Step, Trouble};
use crate::provider::{Moment, Provider, ProviderError, Then};

/// A caller's trouble, waiting for its step.
pub(super) struct Armed {
    /// The caller's number.
    pub(super) id: usize,
    pub(super) trouble: Trouble,
    /// Notified when the step is reached.
    pub(super) reached: Arc<Notify>,
    /// Lets a held-back step go on, once its caller was dropped.
    pub(super) let_go: Arc<Notify>,
    /// Notified once the caller's first claim is answered, or held back.
    pub(super) claimed: Arc<Notify>,
    /// Whether the caller's first claim was seen.
    pub(super) seen: bool,
    /// The provider's ticket for a call it is to lose.
    pub(super) losing: Option<u64>,
    /// Set once the provider failed the caller's call after acting.
    pub(super) faulted: Arc<AtomicBool>,
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

/// A key that leaves out the object its caller asked about.
#[derive(Clone)]
pub(super) struct Stray {
    pub(super) caller: usize,
    pub(super) key: String,
    pub(super) object: String,
}

/// The storm's store, around the store under test.
pub(super) struct Troubled {
    pub(super) inner: Arc<dyn Store>,
    /// The provider that loses a holder's call, for troubles in the action.
    provider: Option<Provider>,
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
    /// The callers that vanished: none of their later steps reaches the store.
    vanished: Arc<Mutex<HashSet<usize>>>,
    asked: Mutex<HashMap<String, Asked>>,
    /// Each caller's key, as its first claim named it.
    keys: Mutex<HashMap<usize, String>>,
    stray: Mutex<Option<Stray>>,
    /// Each caller's claims won and not yet completed or released, and a
    /// wake-up when one is: a dropped caller's steps run on without it.
    open: Mutex<HashMap<usize, u32>>,
    closed: Notify,
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

/// Where the provider loses the call of a holder with this trouble, and
/// what becomes of the call there.
fn lost_at(trouble: Trouble) -> Option<(Moment, Then)> {
    match trouble {
        Trouble::DroppedDuringAction => Some((Moment::BeforeActing, Then::Hangs)),
        Trouble::DroppedAfterActing | Trouble::Vanishes => Some((Moment::Acted, Then::Hangs)),
        Trouble::ConnectionDropsAfterActing => {
            Some((Moment::Acted, Then::Fails(ProviderError::ConnectionDropped)))
        }
        Trouble::TimesOutAfterActing => {
            Some((Moment::Acted, Then::Fails(ProviderError::ReplyLost)))
        }
        _ => None,
    }
}

impl Troubled {
    pub(super) fn new(
        inner: Arc<dyn Store>,
        provider: Option<Provider>,
        stall: Duration,
        pause: Duration,
    ) -> Troubled {
        Troubled {
            inner,
            provider,
            stall,
            pause,
            armed: Mutex::new(Vec::new()),
            vanished: Arc::new(Mutex::new(HashSet::new())),
            asked: Mutex::new(HashMap::new()),
            claimed: Mutex::new(HashMap::new()),
            claimed_again: Notify::new(),
            keys: Mutex::new(HashMap::new()),
            stray: Mutex::new(None),
            open: Mutex::new(HashMap::new()),
            closed: Notify::new(),
        }
    }

    /// Waits until none of `callers` holds a claim it won, other than a
    /// vanished one, or for `patience` at most: a dropped caller's claim
    /// may still be answered, and released, after the caller is gone, and
    /// what follows must find it gone on every run.
    pub(super) async fn quiet(&self, callers: &[usize], patience: Duration) {
        let deadline = tokio::time::sleep(patience);
        tokio::pin!(deadline);
        loop {
            let closed = self.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            let held = {
                let open = lock(&self.open);
                let vanished = lock(&self.vanished);
                callers
                    .iter()
                    .any(|id| !vanished.contains(id) && open.get(id).is_some_and(|n| *n > 0))
            };
            if !held {
                return;
            }
            tokio::select! {
                () = &mut deadline => return,
                () = closed => {}
            }
        }
    }

    /// Notes that a claim of caller `id` was completed or released (or is
    /// no longer its own), unless the store was unreachable, which the
    /// guard tries again.
    fn closing<T>(&self, id: usize, result: &StoreResult<T>) {
        if matches!(result, Err(StoreError::Unavailable(_))) {
            return;
        }
        if let Some(n) = lock(&self.open).get_mut(&id) {
            *n = n.saturating_sub(1);
        }
        self.closed.notify_waiters();
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

    /// Takes back a trouble its caller never reached.
    pub(super) fn disarm(&self, id: usize) {
        let mut armed = lock(&self.armed);
        for a in armed.iter().filter(|a| a.id == id) {
            if let (Some(provider), Some(ticket)) = (&self.provider, a.losing) {
                provider.keep_call(ticket);
            }
        }
        armed.retain(|a| a.id != id);
    }

    /// Every key claimed, with what its last holder asked.
    pub(super) fn asked(&self) -> Vec<Asked> {
        lock(&self.asked).values().cloned().collect()
    }

    /// The key of caller `id`'s first claim.
    pub(super) fn key_of(&self, id: usize) -> Option<String> {
        lock(&self.keys).get(&id).cloned()
    }

    /// The first key that left out its caller's object.
    pub(super) fn stray(&self) -> Option<Stray> {
        lock(&self.stray).clone()
    }

    /// Notes caller `id`'s key, the first time; a key without the caller's
    /// object is noted as stray.
    fn note_key(&self, id: usize, object: &str, key: &Key) {
        let mut keys = lock(&self.keys);
        if keys.contains_key(&id) {
            return;
        }
        keys.insert(id, key.as_str().to_owned());
        if !key.as_str().contains(object) {
            lock(&self.stray).get_or_insert_with(|| Stray {
                caller: id,
                key: key.as_str().to_owned(),
                object: object.to_owned(),
            });
        }
    }

    /// The trouble of caller `id`'s first claim. Marks it seen; takes it
    /// out if `now` accepts it, and returns the notice of its claim.
    fn claiming(
        &self,
        id: usize,
        now: impl Fn(Trouble) -> bool,
    ) -> Option<(Arc<Notify>, Option<Taken>)> {
        let mut armed = lock(&self.armed);
        let at = armed.iter().position(|a| a.id == id && !a.seen)?;
        armed[at].seen = true;
        let claimed = Arc::clone(&armed[at].claimed);
        if !now(armed[at].trouble) {
            return Some((claimed, None));
        }
        let a = armed.remove(at);
        Some((claimed, Some(taken(a))))
    }

    /// After caller `id`'s first claim was answered: drops its trouble if
    /// the claim was not won. Once it was, a trouble in the action has the
    /// provider lose the holder's call at its moment, where the caller is
    /// dropped (and, if it vanishes, its later steps are swallowed).
    fn answered(&self, id: usize, object: &str, won: bool) {
        let mut armed = lock(&self.armed);
        let Some(at) = armed.iter().position(|a| a.id == id) else {
            return;
        };
        if !won {
            armed.remove(at);
            return;
        }
        let a = &mut armed[at];
        let (Some((moment, then)), Some(provider)) = (lost_at(a.trouble), &self.provider) else {
            return;
        };
        let reached = Arc::clone(&a.reached);
        let vanished = (a.trouble == Trouble::Vanishes).then(|| Arc::clone(&self.vanished));
        let faulted = a
            .trouble
            .is_provider_fault()
            .then(|| Arc::clone(&a.faulted));
        a.losing = Some(provider.on_next_call(object, moment, then, move || {
            if let Some(vanished) = vanished {
                lock(&vanished).insert(id);
            }
            if let Some(faulted) = faulted {
                faulted.store(true, Ordering::SeqCst);
            }
            reached.notify_one();
        }));
    }

    /// Caller `id`'s trouble that `wanted` accepts, taken, once its claim
    /// was seen.
    fn take(&self, id: usize, wanted: impl Fn(Trouble) -> bool) -> Option<Taken> {
        let mut armed = lock(&self.armed);
        let at = armed
            .iter()
            .position(|a| a.id == id && a.seen && wanted(a.trouble))?;
        Some(taken(armed.remove(at)))
    }

    fn vanished(&self, id: usize) -> bool {
        lock(&self.vanished).contains(&id)
    }

    /// The trouble, if any, of a step other than a claim.
    async fn troubled(&self, id: usize, claim: &Claim, step: Step) -> StoreResult<()> {
        let taken = self.take(id, |t| match t {
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

    pub(super) async fn claim(
        &self,
        id: usize,
        object: &str,
        req: ClaimRequest<'_>,
    ) -> StoreResult<ClaimAnswer> {
        self.note_key(id, object, req.key);
        let mine = self.claiming(id, |t| {
            matches!(
                t,
                Trouble::Fails(Step::Claim)
                    | Trouble::Stalls(Step::Claim)
                    | Trouble::AnswersLate(Step::Claim)
                    | Trouble::DroppedBeforeClaimAnswer
            )
        });
        let first = mine.is_some();
        let (claimed, before) = match mine {
            Some((claimed, before)) => (Some(claimed), before),
            None => (None, None),
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
        let won = match &answer {
            Ok(ClaimAnswer::Claimed(_)) => {
                *lock(&self.open).entry(id).or_default() += 1;
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
                true
            }
            _ => false,
        };
        if first {
            self.answered(id, object, won);
        }
        if let Some(claimed) = &claimed {
            claimed.notify_one();
        }
        if let Some(taken) = late {
            taken.reached.notify_one();
            taken.let_go.notified().await;
        }
        answer
    }

    pub(super) async fn complete(
        &self,
        id: usize,
        claim: &Claim,
        finished: Completion,
    ) -> StoreResult<()> {
        if self.vanished(id) {
            return Ok(());
        }
        let late = self.take(id, |t| t == Trouble::AnswersLate(Step::Complete));
        self.troubled(id, claim, Step::Complete).await?;
        let done = self.inner.complete(claim, finished).await;
        self.closing(id, &done);
        if let Some(taken) = late {
            taken.reached.notify_one();
            taken.let_go.notified().await;
        }
        done
    }

    pub(super) async fn release(&self, id: usize, claim: &Claim) -> StoreResult<()> {
        if self.vanished(id) {
            return Ok(());
        }
        self.troubled(id, claim, Step::Release).await?;
        let done = self.inner.release(claim).await;
        self.closing(id, &done);
        done
    }

    pub(super) async fn renew(&self, id: usize, claim: &Claim, lease: Duration) -> StoreResult<()> {
        if self.vanished(id) {
            return Ok(());
        }
        self.troubled(id, claim, Step::Renew).await?;
        self.inner.renew(claim, lease).await
    }
}
