//! A claim the guard holds, and the store steps that must run to their end
//! whatever happens to the call that started them.
//!
//! Agent frameworks drop tool futures at any `.await`: a timeout around the
//! tool, a `select!` with another branch, an abandoned prompt. A dropped
//! future must never leave a claim that nobody owns, nor lose the record of
//! an action that happened. So, for stores that do I/O:
//!
//! - the claim runs on a task of its own, and its answer carries the held
//!   claim as a [`Held`]: whoever drops it unused, the caller or the task's
//!   output left unread, releases it;
//! - the completion runs on a task of its own, so it is recorded even if
//!   nobody waits for it any more, and it is tried again while the lease
//!   holds if the store is briefly unreachable;
//! - the lease is renewed on a task of its own, beside the action, so a
//!   stalled store never stalls the action.
//!
//! Stores that answer at once (the memory store)
//! are called inline: nothing there can be interrupted halfway.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::verify::{Checked, Verification, unknown_detail};
use super::{answers_at_once, memory};
use crate::key::Key;
use crate::observe;
use crate::store::record::RecordState;
use crate::store::record::{Completion, RecordValue};
use crate::store::{Claim, Store, StoreError, StoreFuture, StoreResult};
use crate::tool::ToolId;

/// Runs a store step to its end even if the caller stops waiting: on a task
/// of its own when there is a runtime to spawn it on.
pub(super) async fn detached<T: Send + 'static>(
    step: impl Future<Output = StoreResult<T>> + Send + 'static,
) -> StoreResult<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime
            .spawn(step)
            .await
            .map_err(|e| StoreError::Backend(Box::new(e)))?,
        Err(_) => step.await,
    }
}

/// A held claim. Until it is completed or released, dropping it releases
/// the claim: an error, a panic or a dropped future in the action leaves no
/// claim behind.
pub(crate) struct Held {
    store: Arc<dyn Store>,
    claim: Claim,
    lease: Duration,
    armed: bool,
    renewal: Option<Renewal>,
    /// Set once the action may have taken effect and the call can ask the
    /// provider: dropped unused, the claim is then settled by asking, not
    /// released. Boxed, as most calls have none.
    abandoned: Option<Box<(Key, ToolId, Verification)>>,
}

impl Held {
    /// The claim `claim`, just won in `store`, armed: dropped unused, it is
    /// released.
    pub(super) fn new(store: &Arc<dyn Store>, claim: Claim, lease: Duration) -> Held {
        Held {
            store: Arc::clone(store),
            claim,
            lease,
            armed: true,
            renewal: None,
            abandoned: None,
        }
    }

    /// Whether [`Held::verify_if_abandoned`] was asked.
    pub(crate) fn verifies_if_abandoned(&self) -> bool {
        self.abandoned.is_some()
    }

    /// From now on, dropped unused (the call's future dropped mid-action,
    /// a panic in the action, the call dropped while it asks the provider),
    /// the claim is not released: the action may have taken effect, so a
    /// task of its own asks the provider under `key` and records what it
    /// says (`settle_abandoned`).
    pub(crate) fn verify_if_abandoned(
        &mut self,
        key: Key,
        tool: ToolId,
        verification: Verification,
    ) {
        self.abandoned = Some(Box::new((key, tool, verification)));
    }

    /// Whether this claim took over from a holder whose lease ran out.
    pub(crate) fn taken_over(&self) -> bool {
        self.claim.taken_over
    }

    /// The store the claim is held in.
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// The claim's fence.
    pub(crate) fn fence(&self) -> u64 {
        self.claim.fence
    }

    /// Starts renewing the lease beside the action, if the store's leases
    /// can run out under a live holder.
    pub(crate) fn renew_while_acting(&mut self) {
        let Some(every) = self.store.renew_every(self.lease) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let lease_end = Arc::new(LeaseEnd(Mutex::new(Instant::now() + self.lease)));
        // In the call's span, so its renewals are traced with the call.
        let task = runtime.spawn(tracing::Instrument::in_current_span(renew(
            Arc::clone(&self.store),
            self.claim.clone(),
            every,
            self.lease,
            Arc::clone(&lease_end),
        )));
        self.renewal = Some(Renewal { task, lease_end });
    }

    /// Records the completed action. The record is written even if this
    /// future is dropped, and tried again while the lease holds if the store
    /// is unreachable. A result the store cannot keep faithfully is recorded
    /// as an unknown outcome, so that no later call runs the action again.
    pub(crate) fn complete(
        mut self,
        finished: Completion,
    ) -> StoreFuture<'static, StoreResult<()>> {
        // The action happened: from here on the claim is never released.
        self.armed = false;
        // Tried again until the lease as it stands now runs out; renewing
        // stops, so the retries stay bounded by one lease.
        let lease_end = self.renewal.take().map(|r| r.lease_end.get());
        // The memory store records at once, and fails only when the claim
        // is lost: nothing to try again, nothing to copy for a retry.
        if let Some(memory) = memory(&self.store) {
            return StoreFuture::ready(memory.complete_at_once(&self.claim, finished));
        }
        let store = Arc::clone(&self.store);
        let claim = self.claim.clone();
        let lease = self.lease;
        StoreFuture::boxed(detached(async move {
            let deadline = lease_end.unwrap_or_else(|| Instant::now() + lease);
            record(&*store, &claim, finished, deadline).await
        }))
    }

    /// The claim held.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(crate) fn claim(&self) -> &Claim {
        &self.claim
    }

    /// The lease's renewal, handed to the action's own transaction, which
    /// writes the completion by other means: dropped, it stops.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(crate) fn take_renewal(&mut self) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        self.renewal
            .take()
            .map(|renewal| Box::new(renewal) as Box<dyn std::any::Any + Send + Sync>)
    }

    /// Lets the claim go without a store step: its completion committed with
    /// the action's transaction, or the claim is no longer this holder's.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(crate) fn settled(mut self) {
        self.armed = false;
        self.renewal = None;
    }

    /// Gives the claim up without a record, so that a retry acts again. The
    /// release runs to its end even if this future is dropped.
    pub(crate) fn release(mut self) -> StoreFuture<'static, ()> {
        self.armed = false;
        self.renewal = None;
        // The memory store releases at once; a claim already lost is not
        // this holder's to release.
        if let Some(memory) = memory(&self.store) {
            let _ = memory.release_at_once(&self.claim);
            return StoreFuture::ready(());
        }
        let store = Arc::clone(&self.store);
        let claim = self.claim.clone();
        let lease = self.lease;
        StoreFuture::boxed(async move {
            let _ = detached(async move {
                release(&*store, &claim, lease).await;
                Ok(())
            })
            .await;
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.armed {
            self.renewal = None;
            return;
        }
        if let Some(abandoned) = self.abandoned.take() {
            let (key, tool, verification) = *abandoned;
            let renewal = self.renewal.take();
            let (store, claim) = (Arc::clone(&self.store), self.claim.clone());
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(settle_abandoned(
                        store,
                        claim,
                        self.lease,
                        (key, tool, verification),
                        renewal,
                    ));
                }
                // No runtime to ask on: nobody can say, and the record says
                // so (the memory store writes at once; another store's
                // lease runs out, and the takeover verifies).
                Err(_) => {
                    let detail = unknown_detail(DROPPED, None);
                    let unknown = Completion {
                        state: RecordState::Unknown,
                        value: detail,
                        completed_at: SystemTime::now(),
                    };
                    if answers_at_once(&store) {
                        let _ = store.complete(&claim, unknown).into_ready();
                    }
                }
            }
            return;
        }
        self.renewal = None;
        // The memory store releases synchronously. A store that does I/O
        // releases on a task of its own; with no runtime left, its lease
        // frees the claim.
        if answers_at_once(&self.store) {
            let _ = self.store.release(&self.claim).into_ready();
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = Arc::clone(&self.store);
            let claim = self.claim.clone();
            let lease = self.lease;
            runtime.spawn(async move { release(&*store, &claim, lease).await });
        }
    }
}

/// Why a call dropped mid-action asks the provider.
const DROPPED: &str = "the call was dropped, or panicked, after its action may have taken effect";

/// Settles the claim of a call dropped after its action may have taken
/// effect: asks the provider, its lease renewed meanwhile, then records the
/// result it found, releases the claim if the action did not happen, or
/// records the outcome as unknown. A duplicate waiting meanwhile gets what
/// it comes to.
async fn settle_abandoned(
    store: Arc<dyn Store>,
    claim: Claim,
    lease: Duration,
    (key, tool, verification): (Key, ToolId, Verification),
    renewal: Option<Renewal>,
) {
    let checked = verification.ask(key).await;
    let lease_end = renewal.map_or_else(|| Instant::now() + lease, |r| r.lease_end.get());
    let (state, value) = match checked {
        Checked::NotApplied => return release(&*store, &claim, lease).await,
        Checked::Applied(value) => (RecordState::Done, value),
        Checked::Unknown(why) => (RecordState::Unknown, unknown_detail(&why, Some(DROPPED))),
    };
    let finished = Completion {
        state,
        value,
        completed_at: SystemTime::now(),
    };
    match record(&*store, &claim, finished, lease_end).await {
        Ok(()) if state == RecordState::Unknown => observe::unknown_outcome(&tool, true),
        _ => {}
    }
}

/// Completes a claim, trying again while the store is unreachable, until
/// `deadline`. A result that cannot be stored faithfully is recorded as an
/// unknown outcome instead, and the reason returned.
async fn record(
    store: &dyn Store,
    claim: &Claim,
    finished: Completion,
    deadline: Instant,
) -> StoreResult<()> {
    let recorded = retrying(deadline, || store.complete(claim, finished.clone())).await;
    if let Err(StoreError::Unrecordable(_)) = &recorded {
        let unknown = Completion {
            state: RecordState::Unknown,
            value: RecordValue::from_json("null"),
            completed_at: finished.completed_at,
        };
        // If even this fails, the claim stays held until its lease runs out,
        // and the takeover policy decides, as after a crash.
        let _ = retrying(deadline, || store.complete(claim, unknown.clone())).await;
    }
    recorded
}

/// Releases a claim, trying again for up to a lease while the store is
/// unreachable; after that the lease frees it.
async fn release(store: &dyn Store, claim: &Claim, lease: Duration) {
    let _ = retrying(Instant::now() + lease, || store.release(claim)).await;
}

/// Runs a store step, trying again with backoff while the store is
/// unavailable or the step gave way to another writer, and a retry could
/// still start before `deadline`.
async fn retrying<F, Fut>(deadline: Instant, mut step: F) -> StoreResult<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StoreResult<()>>,
{
    let mut backoff = Backoff::new();
    loop {
        match step().await {
            Err(StoreError::Unavailable(_) | StoreError::Contended(_))
                if backoff.again(deadline).await => {}
            other => return other,
        }
    }
}

/// The renewal task of a held claim; stopped when dropped.
struct Renewal {
    task: JoinHandle<()>,
    lease_end: Arc<LeaseEnd>,
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// When the lease runs out, as of the last renewal the store accepted.
struct LeaseEnd(Mutex<Instant>);

impl LeaseEnd {
    fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }
}

/// Renews a claim's lease every `every`, on a task of its own beside the
/// action, until stopped or the lease is lost. A store that is briefly down
/// is tried again at the next turn.
async fn renew(
    store: Arc<dyn Store>,
    claim: Claim,
    every: Duration,
    lease: Duration,
    lease_end: Arc<LeaseEnd>,
) {
    loop {
        tokio::time::sleep(every).await;
        let asked_at = Instant::now();
        match store.renew(&claim, lease).await {
            Ok(()) => {
                lease_end.set(asked_at + lease);
                observe::lease_renewed();
            }
            // Nothing left to renew; the completion reports it.
            Err(StoreError::LeaseLost) => return observe::lease_lost(),
            Err(err) => observe::renewal_failed(&*store, &err),
        }
    }
}
