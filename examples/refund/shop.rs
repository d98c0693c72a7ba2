//! What one version of the tool takes and can reach: the model's
//! arguments, the shop behind it, and what it fails with.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use idempotent_tools::MemoryStore;
use idempotent_tools_testing::{Provider, ProviderError};
use serde::Deserialize;

/// The tool's arguments, as the model writes them.
#[derive(Debug, Clone, Deserialize)]
pub struct RefundArgs {
    pub(super) order_id: String,
    pub(super) usd: u64,
    /// Worded by the model, differently each time: never part of a key.
    pub(super) reason: String,
}

/// What one version of the tool can reach: the provider, its own record of
/// refunded orders, and the store behind `#[idempotent]`. Fresh for each row.
#[derive(Clone, Default)]
pub struct Shop {
    pub(super) provider: Provider,
    pub(super) refunded: Arc<Mutex<HashSet<String>>>,
    pub(super) store: Arc<MemoryStore>,
}

impl Shop {
    pub fn with_provider(provider: Provider) -> Shop {
        Shop {
            provider,
            refunded: Arc::default(),
            store: Arc::new(MemoryStore::new()),
        }
    }

    pub(super) fn refunded(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.refunded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PayError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
    /// The shop's own database failed.
    #[error("the ledger failed: {0}")]
    Ledger(String),
    /// The tool's process died mid-call (a stand-in: the task panicked).
    #[error("the tool crashed")]
    Crashed,
}
