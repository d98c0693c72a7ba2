//! What `#[idempotent(.., transaction)]` expands into: the body runs as
//! the action of
//! [`Call::run_in_transaction`](crate::call::Call::run_in_transaction) on a
//! Postgres store, handed the transaction through the argument marked
//! `#[transaction]`.

#[cfg(feature = "postgres")]
use std::future::Future;

use super::GuardedReturn;
use super::Prepared;
use crate::outcome::Outcome;

#[cfg(feature = "postgres")]
pub use postgres::*;

#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::Arc;

    use crate::PostgresStore;
    pub use crate::store::postgres::tokio_postgres::Transaction;
    pub use crate::store::postgres_store::Scope;
    use crate::store::transaction::TransactionFuture;

    /// A store a transactional tool can run in: a Postgres store, shared or
    /// borrowed.
    #[diagnostic::on_unimplemented(
        message = "`#[idempotent(.., transaction)]` runs the tool's body in a transaction on a `PostgresStore`, and `{Self}` is not one",
        label = "this store is not a `PostgresStore`",
        note = "name the Postgres store whose database the tool writes in: `store = &self.db` with `db: PostgresStore` (or an `Arc` of one)",
        note = "on SQLite, build the call by hand: `Call::new(..).run_in_transaction(&store, |tx| ..)`"
    )]
    pub trait InTransaction {
        /// The store.
        fn postgres(&self) -> &PostgresStore;
    }

    impl InTransaction for PostgresStore {
        fn postgres(&self) -> &PostgresStore {
            self
        }
    }

    impl<S: InTransaction + ?Sized> InTransaction for Arc<S> {
        fn postgres(&self) -> &PostgresStore {
            S::postgres(self)
        }
    }

    impl<S: InTransaction + ?Sized> InTransaction for &S {
        fn postgres(&self) -> &PostgresStore {
            S::postgres(self)
        }
    }

    /// The body of a transactional tool, as its action.
    pub type Action<'t, R> = TransactionFuture<
        't,
        Result<<R as super::GuardedReturn>::Value, <R as super::GuardedReturn>::Error>,
    >;
}

#[cfg(not(feature = "postgres"))]
pub use without_postgres::*;

#[cfg(not(feature = "postgres"))]
mod without_postgres {
    /// A store a transactional tool can run in: none without the
    /// `postgres` feature.
    #[diagnostic::on_unimplemented(
        message = "`#[idempotent(.., transaction)]` needs the `postgres` feature of `idempotent-tools`",
        label = "the tool's body runs in a transaction on this store",
        note = "turn on the `postgres` feature and name a `PostgresStore`; on SQLite, build the call by hand: `Call::new(..).run_in_transaction(&store, |tx| ..)`"
    )]
    pub trait InTransaction {
        /// Never called: nothing implements this trait.
        fn never(&self) -> std::convert::Infallible;
    }
}

/// Runs a transactional tool's body under the guard: `call` is the
/// prepared call, or why it could not be prepared (then the body does not
/// run), `store` the Postgres store named by `store = ...`, and `action`
/// the body, handed the transaction.
#[cfg(feature = "postgres")]
pub fn run<'a, R, S, F>(
    call: Prepared,
    store: &'a S,
    action: F,
) -> impl Future<Output = Result<Outcome<R::Value>, R::Error>> + 'a
where
    R: GuardedReturn,
    R::Error: 'a,
    S: InTransaction + ?Sized,
    F: for<'t> FnOnce(&'t Transaction<'t>, Scope<'t, 'a>) -> Action<'t, R> + 'a,
{
    let store = store.postgres();
    let call = call.into_call::<F>().map(|call| {
        use crate::store::transaction::TransactionalStore;
        crate::guard::transact(call, store.shared(), move |trip| {
            store.transact_in_scope(trip, action)
        })
    });
    async move {
        match call {
            Ok(call) => call.await,
            Err(err) => Err(err.into()),
        }
    }
}

/// Stands in for the Postgres form without the `postgres` feature: the
/// store's bound fails, with a message that says so.
#[cfg(not(feature = "postgres"))]
pub async fn run<R, S, F>(
    _call: Prepared,
    store: &S,
    _action: F,
) -> Result<Outcome<R::Value>, R::Error>
where
    R: GuardedReturn,
    S: InTransaction + ?Sized,
{
    match store.never() {}
}

/// Checks at the `store = ...` expression that it names a store a
/// transactional tool can run in.
pub fn in_transaction<S: InTransaction + ?Sized>(store: &S) -> &S {
    store
}
