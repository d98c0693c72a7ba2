//! One caller's handle on the storm's store: each step it takes is known
//! to be that caller's.

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreFuture, StoreResult,
};

use super::faults::Troubled;

/// One caller's handle on the storm's store: the tool is given this.
pub(super) struct Handle {
    pub(super) store: Arc<Troubled>,
    pub(super) caller: usize,
    pub(super) object: String,
}

impl Store for Handle {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        StoreFuture::boxed(self.store.claim(self.caller, &self.object, req))
    }

    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.store.complete(self.caller, claim, finished))
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.store.release(self.caller, claim))
    }

    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.store.renew(self.caller, claim, lease))
    }

    fn kind(&self) -> &'static str {
        self.store.inner.kind()
    }

    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        self.store.inner.renew_every(lease)
    }
}
