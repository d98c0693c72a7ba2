//! A call whose action writes in a transaction on the store's own database,
//! and whose completion commits in that same transaction. The guard's half:
//! the claim, and what follows however the transaction ended; each store's
//! half (the transaction itself) is behind
//! [`TransactionalStore`](crate::call::TransactionalStore).
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
use crate::store::transaction::{Transacted, TransactionalStore, Trip};

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
        transact(self, store.shared(), |trip| store.transact(trip, action)).await
    }
}

/// Runs `call` on `store` with its action in a transaction: claims the key,
/// hands the claim to `transact` (the store's half, which acts and commits)
/// and ends the call as the transaction ended. A takeover always acts: a
/// holder's writes cannot have committed without its record.
pub(crate) fn transact<'a, T, E, F, Fut>(
    call: Call,
    store: std::sync::Arc<dyn Store>,
    transact: F,
) -> impl Future<Output = Result<Outcome<T>, E>> + 'a
where
    F: FnOnce(Trip) -> Fut + 'a,
    Fut: Future<Output = Transacted<T, E>> + 'a,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error> + 'a,
{
    let call = call.store(store).takeover(Takeover::Rerun);
    let span = observe::call_span(&call.tool, call.key.as_str(), call.store.as_deref());
    in_transaction(call, transact).instrument(span)
}

async fn in_transaction<T, E, F, Fut>(mut call: Call, transact: F) -> Result<Outcome<T>, E>
where
    F: FnOnce(Trip) -> Fut,
    Fut: Future<Output = Transacted<T, E>>,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    let begun = match call.begin(&mut |_| {}) {
        Begin::Now(begun) => begun,
        Begin::Later(claiming) => claiming.await,
    };
    let mut acting = match begun {
        Begun::Act(acting) => acting,
        Begun::Ended(ended) => return ended.into_result(None, None),
    };
    let key = acting.active.key().clone();
    let store = acting.store();
    let active = acting.active.clone();
    let trip = Trip::new(
        acting.claim().clone(),
        std::sync::Arc::new(move |step: &mut dyn FnMut()| active.poll_as(step)),
        acting.take_renewal(),
    );
    match transact(trip).await {
        Transacted::Committed(value) => {
            observe::fresh(acting.tool());
            acting.settled();
            Ok(Outcome::Fresh { value })
        }
        Transacted::NotBegun(cause) => {
            acting.release().await;
            Err(Error::Store(cause).into())
        }
        Transacted::Failed(err) => {
            let tool = acting.tool().clone();
            acting.release().await;
            observe::released(&tool);
            Err(err)
        }
        Transacted::RolledBack { cause, still_mine } => {
            observe::not_recorded(acting.tool(), &*store, &cause);
            if still_mine {
                acting.release().await;
            } else {
                acting.settled();
            }
            Err(Error::RolledBack { key, cause }.into())
        }
        Transacted::MaybeCommitted { cause, value } => {
            observe::not_recorded(acting.tool(), &*store, &cause);
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
