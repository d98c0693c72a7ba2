//! The stand-in payment provider the cases count refunds at, and the
//! tool's error and result.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idempotent_tools::{Error, RunError};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};

/// The tools' error: the guard's, a run id's, or the provider's decline.
#[derive(Debug, thiserror::Error)]
pub enum PayError {
    #[error(transparent)]
    Idempotency(#[from] Error),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("the provider declined")]
    Declined,
    #[error("the provider did not answer in time")]
    TimedOut,
}

/// A refund the provider made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    /// Which provider call made it: 1 for the first.
    pub provider_call: usize,
    pub order_id: String,
    pub usd: u64,
}

/// A payment provider that counts the refunds it is asked for, and can be
/// told to hold, fail or panic.
#[derive(Default)]
pub struct Provider {
    calls: AtomicUsize,
    /// Notified as each call reaches the provider.
    pub entered: Notify,
    /// When set, each call waits for a permit before it finishes.
    gate: Option<Semaphore>,
    /// The next call is declined.
    pub fail_next: AtomicBool,
    /// The next call panics.
    pub panic_next: AtomicBool,
    /// The next call refunds, then times out before it answers.
    pub time_out_after_next: AtomicBool,
    /// The refunds made, for lookups. The provider takes no key.
    made: Mutex<Vec<Refund>>,
}

impl Provider {
    pub fn new() -> Arc<Provider> {
        Arc::new(Provider::default())
    }

    /// A provider that holds each call until [`Provider::open`].
    pub fn gated() -> Arc<Provider> {
        Arc::new(Provider {
            gate: Some(Semaphore::new(0)),
            ..Provider::default()
        })
    }

    /// Lets every held call, and every later one, finish.
    pub fn open(&self) {
        if let Some(gate) = &self.gate {
            gate.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }

    /// How many refunds were asked for.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Makes a refund, numbered by the call that made it.
    pub async fn refund(&self, order_id: String, usd: u64) -> Result<Refund, PayError> {
        let provider_call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.entered.notify_one();
        if let Some(gate) = &self.gate {
            let _permit = gate.acquire().await.map_err(|_| PayError::Declined)?;
        }
        if self.panic_next.swap(false, Ordering::SeqCst) {
            panic!("the provider's client panicked");
        }
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(PayError::Declined);
        }
        let refund = Refund {
            provider_call,
            order_id,
            usd,
        };
        self.made.lock().expect("ledger").push(refund.clone());
        if self.time_out_after_next.swap(false, Ordering::SeqCst) {
            return Err(PayError::TimedOut);
        }
        Ok(refund)
    }

    /// The first refund made on an order, as the provider lists it.
    pub fn refund_of(&self, order_id: &str) -> Option<Refund> {
        let made = self.made.lock().expect("ledger");
        made.iter().find(|r| r.order_id == order_id).cloned()
    }
}
