//! A call whose action writes in a transaction on the store's own database,
//! and whose completion commits in that same transaction.
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
use std::pin::{Pin, pin};
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
use crate::store::record::{Completion, RecordValue};
use crate::store::records::RecordState;
use crate::store::{StoreError, postgres_store::transaction_error};
use crate::{PostgresStore, store::postgres::tokio_postgres::Transaction};

/// The future of an action that runs in a transaction: boxed, so that it
/// may borrow the transaction it is handed.
pub type TransactionFuture<'t, R> = Pin<Box<dyn Future<Output = R> + Send + 't>>;

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
    /// writes cannot have committed without its record.
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
    /// tell whether it committed. The action's own `Err` rolls its writes
    /// back and releases the claim, so a retry acts again. [`Error::Store`]
    /// if no connection could be had for the transaction (the action did
    /// not run).
    ///
    /// # Cancel safety
    ///
    /// Dropped before `COMMIT`, the transaction rolls back and the claim is
    /// released: the next call acts. Dropped during `COMMIT`, the commit
    /// happened or did not, and the release changes nothing if it did.
    pub async fn run_in_transaction<T, E, F>(
        self,
        store: &PostgresStore,
        action: F,
    ) -> Result<Outcome<T>, E>
    where
        F: for<'t> FnOnce(&'t Transaction<'t>) -> TransactionFuture<'t, Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error>,
    {
        let call = self.store(store.shared()).takeover(Takeover::Rerun);
        let span = observe::call_span(&call.tool, call.key.as_str(), call.store.as_deref());
        in_transaction(call, store, action).instrument(span).await
    }
}

async fn in_transaction<T, E, F>(
    mut call: Call,
    store: &PostgresStore,
    action: F,
) -> Result<Outcome<T>, E>
where
    F: for<'t> FnOnce(&'t Transaction<'t>) -> TransactionFuture<'t, Result<T, E>>,
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
        let mut acted = pin!(action(&tx));
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

fn store_dyn(store: &PostgresStore) -> &dyn crate::store::Store {
    store
}
