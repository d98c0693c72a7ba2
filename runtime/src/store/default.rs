//! The process default store, and what a call site may name as its store.

use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;

use super::{MemoryStore, Store};

static DEFAULT_STORE: LazyLock<ArcSwap<Arc<dyn Store>>> =
    LazyLock::new(|| ArcSwap::from_pointee(Arc::new(MemoryStore::new()) as Arc<dyn Store>));

/// The process default store: a [`MemoryStore`] unless switched with
/// [`set_default_store`].
pub fn default_store() -> Arc<dyn Store> {
    Arc::clone(&DEFAULT_STORE.load())
}

/// Switches the process default store, in one line:
///
/// ```
/// use std::sync::Arc;
/// use idempotent_tools::{MemoryStore, set_default_store};
///
/// set_default_store(Arc::new(MemoryStore::new()));
/// ```
///
/// Calls already running keep the store they started with.
pub fn set_default_store(store: Arc<dyn Store>) {
    DEFAULT_STORE.store(Arc::new(store));
}

/// Something a call site can name as its store: an `Arc` of a store, or a
/// reference to one.
pub trait IntoStore {
    /// The store as a trait object.
    fn into_store(self) -> Arc<dyn Store>;
}

impl<S: Store> IntoStore for Arc<S> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}

impl IntoStore for Arc<dyn Store> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}

impl<T: IntoStore + Clone> IntoStore for &T {
    fn into_store(self) -> Arc<dyn Store> {
        self.clone().into_store()
    }
}
