//! The seam between the guard and a store whose calls can act in a
//! transaction on the store's own database.
//!
//! The guard claims the key, then hands the store a [`Trip`]: the claim
//! held, a way to run the action as the key's, and the lease's renewal. The
//! store opens its transaction, runs the action in it, completes the claim
//! in it (fenced on owner and fence) and commits, and answers how that
//! ended as a [`Transacted`]. What follows (a release, a replay for the
//! next caller, the error the caller sees) is the guard's. A store adds a
//! `transaction.rs` of its own that implements [`TransactionalStore`];
//! nothing in the guard names it.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Claim, Store, StoreError};

/// The future of an action that runs in a Postgres transaction: boxed, so
/// that it may borrow the transaction it is handed.
pub type TransactionFuture<'t, R> = Pin<Box<dyn Future<Output = R> + Send + 't>>;

pub(crate) mod sealed {
    /// Only the crate's stores run calls in their transactions.
    pub trait Sealed {}
}

/// A store whose calls can run their action in a transaction on the
/// store's own database, with the completion committed in that same
/// transaction: [`PostgresStore`](crate::PostgresStore) and
/// [`SqliteStore`](crate::SqliteStore). See
/// [`Call::run_in_transaction`](crate::call::Call::run_in_transaction).
///
/// | Store | The action is handed | It returns |
/// |---|---|---|
/// | Postgres | `&tokio_postgres::Transaction` | a [`TransactionFuture`] (`Box::pin(async move { .. })`) |
/// | SQLite | `&rusqlite::Transaction` | its `Result` at once: it runs on the blocking pool |
pub trait TransactionalStore: sealed::Sealed + Send + Sync {
    /// The transaction the action writes in.
    type Transaction<'t>;

    /// What the action returns for a result `R`: a future of it for a store
    /// reached over the network, `R` itself for one whose statements block.
    type Acted<'t, R>;

    /// The same store, shared, as the call's store.
    #[doc(hidden)]
    fn shared(&self) -> Arc<dyn Store>;

    /// Runs `action` in a transaction, completes the trip's claim in it and
    /// commits.
    #[doc(hidden)]
    fn transact<T, E, F>(
        &self,
        trip: Trip,
        action: F,
    ) -> impl Future<Output = Transacted<T, E>> + Send
    where
        F: for<'t> FnOnce(&'t Self::Transaction<'t>) -> Self::Acted<'t, Result<T, E>>
            + Send
            + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: Send + 'static;
}

impl<S: TransactionalStore> sealed::Sealed for Arc<S> {}

/// A shared store runs its calls as the store itself.
impl<S: TransactionalStore> TransactionalStore for Arc<S> {
    type Transaction<'t> = S::Transaction<'t>;
    type Acted<'t, R> = S::Acted<'t, R>;

    fn shared(&self) -> Arc<dyn Store> {
        S::shared(self)
    }

    fn transact<T, E, F>(
        &self,
        trip: Trip,
        action: F,
    ) -> impl Future<Output = Transacted<T, E>> + Send
    where
        F: for<'t> FnOnce(&'t Self::Transaction<'t>) -> Self::Acted<'t, Result<T, E>>
            + Send
            + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: Send + 'static,
    {
        S::transact(self, trip, action)
    }
}

/// Runs one step of an action as its key's, so that `current_key` names
/// the key inside it.
pub(crate) type ActAs = Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

/// What the guard hands a store for one call in a transaction: the claim
/// it holds, how to run the action as the key's, and the lease's renewal,
/// which goes on until the store stops it.
#[doc(hidden)]
pub struct Trip {
    claim: Claim,
    act_as: ActAs,
    renewal: Option<Box<dyn Any + Send + Sync>>,
}

impl Trip {
    pub(crate) fn new(
        claim: Claim,
        act_as: ActAs,
        renewal: Option<Box<dyn Any + Send + Sync>>,
    ) -> Trip {
        Trip {
            claim,
            act_as,
            renewal,
        }
    }

    /// The claim held.
    pub(crate) fn claim(&self) -> &Claim {
        &self.claim
    }

    /// Runs `step` as the key's action.
    #[cfg(feature = "postgres")]
    pub(crate) fn act_as(&self, step: &mut dyn FnMut()) {
        (self.act_as)(step);
    }

    /// How to run a step as the key's action, for a thread of its own.
    #[cfg(feature = "sqlite")]
    pub(crate) fn act_as_owned(&self) -> ActAs {
        Arc::clone(&self.act_as)
    }

    /// Stops renewing the lease: the transaction is about to write the
    /// record, or holds the lock no renewal could pass.
    pub(crate) fn stop_renewing(&mut self) {
        self.renewal = None;
    }
}

/// How a call's transaction ended.
#[doc(hidden)]
pub enum Transacted<T, E> {
    /// The action's writes and its record committed together.
    Committed(T),
    /// The transaction could not begin: the action did not run.
    NotBegun(StoreError),
    /// The action returned `Err`; its writes rolled back.
    Failed(E),
    /// The action ran, then its transaction rolled back, for `cause`.
    /// `still_mine` if the claim is still this holder's (otherwise it was
    /// taken over, and the fence refused the completion).
    RolledBack {
        /// Why the transaction rolled back.
        cause: StoreError,
        /// Whether the claim is still this holder's.
        still_mine: bool,
    },
    /// The commit failed in a way that leaves unknown whether it happened,
    /// and the claim is no longer held as it was: it may have committed.
    MaybeCommitted {
        /// Why the commit's answer was lost.
        cause: StoreError,
        /// The action's result.
        value: T,
    },
}
