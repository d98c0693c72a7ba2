//! A crate that depends on `idempotent-tools` under another name, as
//! `tools`: the attribute and the derive must expand to paths that resolve.

use std::sync::atomic::{AtomicUsize, Ordering};

use tools::{KeyPart, Outcome, Run};

/// Refunds that went out.
pub static REFUNDS: AtomicUsize = AtomicUsize::new(0);

/// The tool's error.
#[derive(Debug, thiserror::Error)]
pub enum PayError {
    /// The guard's own error.
    #[error(transparent)]
    Idempotency(#[from] tools::Error),
}

/// An order id, as a key part of its own.
#[derive(Debug, Clone, Copy, KeyPart, serde::Serialize, serde::Deserialize)]
pub struct OrderId(pub u64);

/// A refund, guarded through the renamed dependency.
#[tools::idempotent(key = "<run>:refund:<order_id>")]
pub async fn refund(run: &Run, order_id: OrderId, cents: u64) -> Result<Outcome<u64>, PayError> {
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// The refund again, by hand, to count it.
pub fn refunds() -> usize {
    REFUNDS.load(Ordering::SeqCst)
}
