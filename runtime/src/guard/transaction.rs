//! A call whose action writes in a transaction on the store's own database,
//! and whose completion commits in that same transaction: the Postgres
//! store's and the SQLite store's.
//!
//! The claim is made as for any call, in a statement of its own, so that
//! duplicates see it in flight and wait. The action then runs in a
//! transaction on another connection of the store's pool; its completion,
//! fenced on the claim's owner and fence, runs in that transaction just
//! before `COMMIT`. So the effect and its record commit together or not at
//! all:
//!
//! - the action fails: `ROLLBACK`, then the claim is released;
//! - the claim was taken over (the fenced completion changes no row):
//!   `ROLLBACK`, and the stale holder's effect vanishes;
//! - the call is dropped, or its process dies, before `COMMIT`: the
//!   transaction rolls back with its connection, and the claim is released
//!   (or its lease runs out), so the retry acts once.

use std::future::Future;
use std::pin::Pin;
#[cfg(feature = "postgres")]
use std::pin::pin;
#[cfg(feature = "sqlite")]
use std::sync::Arc;
#[cfg(feature = "sqlite")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "postgres")]
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::call::Call;
use super::claim::{Begin, Begun};
use crate::error::Error;
use crate::observe;
use crate::outcome::Outcome;
use crate::policy::Takeover;
use crate::store::Store;
#[cfg(feature = "postgres")]
use crate::store::StoreError;
#[cfg(feature = "postgres")]
use crate::store::record::{Completion, RecordValue};
#[cfg(feature = "postgres")]
use crate::store::records::RecordState;
#[cfg(feature = "postgres")]
use crate::{
    PostgresStore, store::postgres::tokio_postgres::Transaction as PgTransaction,
    store::postgres_store::transaction_error,
};
#[cfg(feature = "sqlite")]
use crate::{SqliteStore, store::sqlite::rusqlite::Transaction as SqliteTransaction};

/// The future of an action that runs in a Postgres transaction: boxed, so
/// that it may borrow the transaction it is handed.
pub type TransactionFuture<'t, R> = Pin<Box<dyn Future<Output = R> + Send + 't>>;

mod sealed {
    pub trait Sealed {}
}

/// A store whose calls can run their action in a transaction on the
/// store's own database, with the completion committed in that same
/// transaction: [`PostgresStore`](crate::PostgresStore) and
/// [`SqliteStore`](crate::SqliteStore). See [`Call::run_in_transaction`].
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

    /// Runs `call` with `action` in a transaction; what
    /// [`Call::run_in_transaction`] does.
    #[doc(hidden)]
    fn run_call<T, E, F>(
        &self,
        call: Call,
        action: F,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send
    where
        F: for<'t> FnOnce(&'t Self::Transaction<'t>) -> Self::Acted<'t, Result<T, E>>
            + Send
            + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Send + 'static;
}

impl Call {
    /// Claims the key, then runs `action` in a transaction on `store`'s
    /// database and commits the completion in that same transaction, or
    /// replays.
    ///
    /// For effects in the application's own database: the action's writes
    /// and the record of the call commit together, or neither does. A
    /// crash or a dropped call before the commit leaves no effect and no
    /// record, and the retry acts once; a holder whose claim was taken over
    /// after its lease ran out has its whole transaction rolled back. For
    /// an effect outside the database (someone else's API) it cannot help:
    /// use [`Call::run`] and the provider's own idempotency key.
    ///
    /// The call uses `store` as its store. A takeover from a holder whose
    /// lease ran out always acts ([`Takeover::Rerun`]): that holder's
    /// writes cannot have committed without its record. The action must be
    /// `'static`: move what it needs into it.
    ///
    /// With a [`SqliteStore`](crate::SqliteStore), the action is handed a
    /// `rusqlite` transaction on the store's file and runs at once on the
    /// blocking pool; the transaction is `IMMEDIATE`, so it holds the file's
    /// write lock from before the action to the commit: keep the action
    /// short, as every other claim on the file waits for it.
    ///
    /// ```
    /// use idempotent_tools::SqliteStore;
    /// use idempotent_tools::call::{Call, Key};
    /// use idempotent_tools::store::sqlite::rusqlite;
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// enum CreditError {
    ///     #[error(transparent)]
    ///     Idempotency(#[from] idempotent_tools::Error),
    ///     #[error("the credit could not be written")]
    ///     Database(#[from] rusqlite::Error),
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("idempotent-doc-tx-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::open(dir.join("shop.db"))?;
    /// # rusqlite::Connection::open(dir.join("shop.db"))?
    /// #     .execute_batch("CREATE TABLE store_credit (order_id TEXT, cents INTEGER)")?;
    /// let key = Key::builder().literal("run-1:credit:")?.part("order_id", "1182")?.finish()?;
    /// let issue = |cents: i64| {
    ///     move |tx: &rusqlite::Transaction<'_>| {
    ///         tx.execute(
    ///             "INSERT INTO store_credit (order_id, cents) VALUES ('1182', ?1)",
    ///             [cents],
    ///         )?;
    ///         Ok::<_, CreditError>(cents)
    ///     }
    /// };
    /// let first = Call::new("shop::issue_credit", key.clone())
    ///     .run_in_transaction(&store, issue(500))
    ///     .await?;
    /// let again = Call::new("shop::issue_credit", key)
    ///     .run_in_transaction(&store, issue(500))
    ///     .await?;
    /// assert!(first.is_fresh() && again.is_replay());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    ///
    /// With a [`PostgresStore`](crate::PostgresStore), the action is handed
    /// a `tokio_postgres` transaction on a connection of the store's pool
    /// and returns its future, boxed:
    ///
    /// ```no_run
    /// use idempotent_tools::{Outcome, PostgresStore, Run};
    /// use idempotent_tools::call::{Call, Key};
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// enum CreditError {
    ///     #[error(transparent)]
    ///     Idempotency(#[from] idempotent_tools::Error),
    ///     #[error(transparent)]
    ///     Key(#[from] idempotent_tools::call::KeyError),
    ///     #[error("the credit could not be written")]
    ///     Database(#[from] idempotent_tools::store::postgres::tokio_postgres::Error),
    /// }
    ///
    /// async fn issue_credit(
    ///     store: &PostgresStore,
    ///     run: &Run,
    ///     order_id: &str,
    ///     cents: i64,
    /// ) -> Result<Outcome<i64>, CreditError> {
    ///     let key = Key::builder()
    ///         .part("run", run)?
    ///         .literal(":credit:")?
    ///         .part("order_id", order_id)?
    ///         .finish()?;
    ///     let order_id = order_id.to_owned();
    ///     Call::new("shop::issue_credit", key)
    ///         .run_in_transaction(store, move |tx| {
    ///             Box::pin(async move {
    ///                 tx.execute(
    ///                     "INSERT INTO store_credit (order_id, cents) VALUES ($1, $2)",
    ///                     &[&order_id, &cents],
    ///                 )
    ///                 .await?;
    ///                 Ok(cents)
    ///             })
    ///         })
    ///         .await
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Call::run`], except after acting: [`Error::RolledBack`] when
    /// the transaction was rolled back (the claim was taken over, the
    /// result cannot be recorded, the database refused the completion or
    /// the commit), so the action took no effect; [`Error::NotRecorded`]
    /// only when the connection broke during `COMMIT` and the store cannot
    /// tell whether it committed (Postgres only: SQLite's commit is local).
    /// The action's own `Err` rolls its writes back and releases the claim,
    /// so a retry acts again. [`Error::Store`] if the transaction could not
    /// begin (no connection, or SQLite's write lock busy past its timeout):
    /// the action did not run.
    ///
    /// # Cancel safety
    ///
    /// Dropped before `COMMIT`, the transaction rolls back and the claim is
    /// released: the next call acts. Dropped during `COMMIT`, the commit
    /// happened or did not, and the release changes nothing if it did. A
    /// SQLite action already running on the blocking pool runs to its end,
    /// and its transaction then rolls back instead of committing.
    pub async fn run_in_transaction<S, T, E, F>(self, store: &S, action: F) -> Result<Outcome<T>, E>
    where
        S: TransactionalStore,
        F: for<'t> FnOnce(&'t S::Transaction<'t>) -> S::Acted<'t, Result<T, E>> + Send + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Send + 'static,
    {
        store.run_call(self, action).await
    }
}

impl<S: TransactionalStore> sealed::Sealed for std::sync::Arc<S> {}

/// A shared store runs its calls as the store itself.
impl<S: TransactionalStore> TransactionalStore for std::sync::Arc<S> {
    type Transaction<'t> = S::Transaction<'t>;
    type Acted<'t, R> = S::Acted<'t, R>;

    fn run_call<T, E, F>(
        &self,
        call: Call,
        action: F,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send
    where
        F: for<'t> FnOnce(&'t Self::Transaction<'t>) -> Self::Acted<'t, Result<T, E>>
            + Send
            + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Send + 'static,
    {
        S::run_call(self, call, action)
    }
}

#[cfg(feature = "postgres")]
impl sealed::Sealed for PostgresStore {}

#[cfg(feature = "postgres")]
impl TransactionalStore for PostgresStore {
    type Transaction<'t> = PgTransaction<'t>;
    type Acted<'t, R> = TransactionFuture<'t, R>;

    fn run_call<T, E, F>(
        &self,
        call: Call,
        action: F,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send
    where
        F: for<'t> FnOnce(&'t PgTransaction<'t>) -> TransactionFuture<'t, Result<T, E>>
            + Send
            + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Send + 'static,
    {
        postgres_call(call, self, move |tx, _| action(tx))
    }
}

/// What an action that runs in a Postgres transaction may borrow besides
/// the transaction: things that live for `'a`, which outlive the
/// transaction's `'t`. The type carries that bound into the action's
/// higher-ranked signature, so that an action may borrow the tool's
/// `&self` and arguments, as `#[idempotent(.., transaction)]` needs.
#[cfg(feature = "postgres")]
pub type Scope<'t, 'a> = std::marker::PhantomData<&'t &'a ()>;

/// A call on `store`, run with `action` in a transaction: the call's store
/// is `store`, and a takeover always acts.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_call<'a, T, E, F>(
    call: Call,
    store: &'a PostgresStore,
    action: F,
) -> impl Future<Output = Result<Outcome<T>, E>> + 'a
where
    F: for<'t> FnOnce(&'t PgTransaction<'t>, Scope<'t, 'a>) -> TransactionFuture<'t, Result<T, E>>
        + 'a,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error> + 'a,
{
    let call = call.store(store.shared()).takeover(Takeover::Rerun);
    let span = observe::call_span(&call.tool, call.key.as_str(), call.store.as_deref());
    in_postgres(call, store, action).instrument(span)
}

#[cfg(feature = "postgres")]
async fn in_postgres<'a, T, E, F>(
    mut call: Call,
    store: &'a PostgresStore,
    action: F,
) -> Result<Outcome<T>, E>
where
    F: for<'t> FnOnce(&'t PgTransaction<'t>, Scope<'t, 'a>) -> TransactionFuture<'t, Result<T, E>>,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    // A Postgres store never answers at once: its claim is always a future.
    let begun = match call.begin(&mut |_| {}) {
        Begin::Now(begun) => begun,
        Begin::Later(claiming) => claiming.await,
    };
    let mut acting = match begun {
        Begun::Act(acting) => acting,
        Begun::Ended(ended) => return ended.into_result(None, None),
    };
    let key = acting.active.key().clone();
    let mut client = match store.connection().await {
        Ok(client) => client,
        Err(cause) => {
            acting.release().await;
            return Err(Error::Store(cause).into());
        }
    };
    let tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(cause) => {
            // Dropped armed, the claim is released on a task of its own,
            // once this connection is back in the pool.
            drop(acting);
            return Err(Error::Store(transaction_error("begin", cause)).into());
        }
    };
    // Polled as the key's action, so that `current_key` names it.
    let acted = {
        let mut acted = pin!(action(&tx, std::marker::PhantomData));
        std::future::poll_fn(|cx| acting.active.poll_as(|| acted.as_mut().poll(cx))).await
    };
    let value = match acted {
        Ok(value) => value,
        Err(err) => {
            let _ = tx.rollback().await;
            drop(client);
            let tool = acting.tool().clone();
            acting.release().await;
            observe::released(&tool);
            return Err(err);
        }
    };
    acting.stop_renewing();
    let completion = Completion {
        state: RecordState::Done,
        value: RecordValue::typed(value.clone()),
        completed_at: SystemTime::now(),
    };
    let cause = match store.complete_in(&tx, acting.claim(), &completion).await {
        Ok(0) => Some((StoreError::LeaseLost, false)),
        Ok(_) => None,
        Err(cause) => Some((cause, true)),
    };
    if let Some((cause, still_mine)) = cause {
        let _ = tx.rollback().await;
        drop(client);
        observe::not_recorded(acting.tool(), store_dyn(store), &cause);
        if still_mine {
            acting.release().await;
        } else {
            acting.settled();
        }
        return Err(Error::RolledBack { key, cause }.into());
    }
    match tx.commit().await {
        Ok(()) => {
            observe::fresh(acting.tool());
            acting.settled();
            Ok(Outcome::Fresh { value })
        }
        Err(failed) => {
            drop(client);
            let cause = transaction_error("commit", failed);
            observe::not_recorded(acting.tool(), store_dyn(store), &cause);
            // Still held: the commit, which would have completed it, did not
            // happen. Otherwise it may have.
            match store.still_holds(acting.claim()).await {
                Ok(true) => {
                    acting.release().await;
                    Err(Error::RolledBack { key, cause }.into())
                }
                _ => {
                    acting.settled();
                    Err(Error::NotRecorded {
                        key,
                        result: serde_json::to_string(&value).ok(),
                        cause,
                    }
                    .into())
                }
            }
        }
    }
}

#[cfg(feature = "sqlite")]
impl sealed::Sealed for SqliteStore {}

#[cfg(feature = "sqlite")]
impl TransactionalStore for SqliteStore {
    type Transaction<'t> = SqliteTransaction<'t>;
    type Acted<'t, R> = R;

    fn run_call<T, E, F>(
        &self,
        call: Call,
        action: F,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send
    where
        F: for<'t> FnOnce(&'t SqliteTransaction<'t>) -> Result<T, E> + Send + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Send + 'static,
    {
        let call = call.store(self.shared()).takeover(Takeover::Rerun);
        let span = observe::call_span(&call.tool, call.key.as_str(), call.store.as_deref());
        in_sqlite(call, self, action).instrument(span)
    }
}

/// Set when the call that owns it is dropped, so that its transaction, on
/// the blocking pool, rolls back instead of committing.
#[cfg(feature = "sqlite")]
#[derive(Default)]
struct Abandoned(Arc<AtomicBool>);

#[cfg(feature = "sqlite")]
impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[cfg(feature = "sqlite")]
async fn in_sqlite<T, E, F>(mut call: Call, store: &SqliteStore, action: F) -> Result<Outcome<T>, E>
where
    F: for<'t> FnOnce(&'t SqliteTransaction<'t>) -> Result<T, E> + Send + 'static,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error> + Send + 'static,
{
    use crate::store::sqlite_store::Ended;

    // A SQLite store never answers at once: its claim is always a future.
    let begun = match call.begin(&mut |_| {}) {
        Begin::Now(begun) => begun,
        Begin::Later(claiming) => claiming.await,
    };
    let mut acting = match begun {
        Begun::Act(acting) => acting,
        Begun::Ended(ended) => return ended.into_result(None, None),
    };
    let key = acting.active.key().clone();
    // The transaction holds the file's write lock from before the action
    // to the commit, so nobody can take the claim over meanwhile; a renewal
    // would only wait on that lock.
    acting.stop_renewing();
    // Run as the key's action, so that `current_key` names it.
    let active = acting.active.clone();
    let action = move |tx: &SqliteTransaction<'_>| active.poll_as(|| action(tx));
    let abandoned = Abandoned::default();
    let ended = store
        .in_transaction(acting.claim(), action, Arc::clone(&abandoned.0))
        .await;
    match ended {
        Ended::Committed(value) => {
            observe::fresh(acting.tool());
            acting.settled();
            Ok(Outcome::Fresh { value })
        }
        Ended::NotBegun(cause) => {
            acting.release().await;
            Err(Error::Store(cause).into())
        }
        Ended::Failed(err) => {
            let tool = acting.tool().clone();
            acting.release().await;
            observe::released(&tool);
            Err(err)
        }
        Ended::RolledBack { cause, still_mine } => {
            observe::not_recorded(acting.tool(), store_dyn(store), &cause);
            if still_mine {
                acting.release().await;
            } else {
                acting.settled();
            }
            Err(Error::RolledBack { key, cause }.into())
        }
    }
}

fn store_dyn<S: Store>(store: &S) -> &dyn Store {
    store
}
