//! A store with faults put in, around the store under test.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreError, StoreFuture, StoreResult,
};

/// A store with faults put in: renewals that stall until let through (as a
/// row lock or a busy database stalls them), and completions that fail as
/// unreachable a number of times.
pub(super) struct Faulty {
    inner: Arc<dyn Store>,
    stall_renewals: bool,
    pub(super) renewal_entered: Notify,
    pub(super) let_renewals_through: Notify,
    failing_completions: AtomicUsize,
    pub(super) completions: AtomicUsize,
}

impl Faulty {
    pub(super) fn new(inner: Arc<dyn Store>) -> Faulty {
        Faulty {
            inner,
            stall_renewals: false,
            renewal_entered: Notify::new(),
            let_renewals_through: Notify::new(),
            failing_completions: AtomicUsize::new(0),
            completions: AtomicUsize::new(0),
        }
    }

    /// Renews every millisecond, and every renewal stalls.
    pub(super) fn stalling_renewals(mut self) -> Faulty {
        self.stall_renewals = true;
        self
    }

    /// The next `failures` completions fail as unreachable.
    pub(super) fn failing_completions(self, failures: usize) -> Faulty {
        self.failing_completions.store(failures, Ordering::SeqCst);
        self
    }
}

impl Store for Faulty {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        self.inner.claim(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        self.completions.fetch_add(1, Ordering::SeqCst);
        let fail = self
            .failing_completions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fail {
            return StoreFuture::ready(Err(StoreError::Unavailable("the store is down".into())));
        }
        self.inner.complete(claim, finished)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.release(claim)
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        if !self.stall_renewals {
            return self.inner.renew(claim, lease);
        }
        StoreFuture::boxed(async move {
            self.renewal_entered.notify_one();
            self.let_renewals_through.notified().await;
            self.inner.renew(claim, lease).await
        })
    }
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        if self.stall_renewals {
            Some(Duration::from_millis(1))
        } else {
            self.inner.renew_every(lease)
        }
    }
}
