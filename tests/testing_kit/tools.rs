//! The tools the runner's cases give it: one that counts the calls in
//! flight, and one that returns only once every call of a step reached it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idempotent_tools::CallId;
use idempotent_tools_testing::{Provider, ProviderError, Tools};
use tokio::sync::Barrier;

use crate::Args;

/// Counts the calls in flight and remembers the most at once.
#[derive(Default)]
pub struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl InFlight {
    /// Runs `work`, counted as in flight while it runs.
    pub async fn during<T>(&self, work: impl Future<Output = T>) -> T {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let out = work.await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// The most calls that were in flight at once.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// A tool that refunds without a key, counting how many calls overlap.
pub fn counted_refunds(provider: &Provider, in_flight: &Arc<InFlight>) -> Tools {
    let (provider, in_flight) = (provider.clone(), Arc::clone(in_flight));
    Tools::new().tool("refund_order", move |args: Args, _call: CallId| {
        let (provider, in_flight) = (provider.clone(), Arc::clone(&in_flight));
        async move {
            let refund = provider.refund(&args.order_id, args.usd, None);
            in_flight.during(refund).await
        }
    })
}

/// A tool that returns only once every call of the step has reached it.
pub fn meet(barrier: &Arc<Barrier>) -> Tools {
    let barrier = Arc::clone(barrier);
    Tools::new().tool("refund_order", move |_: Args, call: CallId| {
        let barrier = Arc::clone(&barrier);
        async move {
            barrier.wait().await;
            Ok::<_, ProviderError>(call.as_str().to_owned())
        }
    })
}
