//! A call in the action's own transaction, the Postgres store's half: a
//! connection of the pool, a transaction on it, the action, the fenced
//! completion inside it, and `COMMIT`.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::NOTIFY_CHANNEL;
use super::PostgresStore;
use super::error::Broken;
use super::sql;
use crate::store::durable::{Backend, CompletionRow, Holder, encode};
use crate::store::record::RecordState;
use crate::store::record::{Completion, RecordValue};
use crate::store::transaction::sealed::Sealed;
use crate::store::transaction::{Transacted, TransactionFuture, TransactionalStore, Trip};
use crate::store::{Claim, Store, StoreError, StoreResult};

/// What an action that runs in a Postgres transaction may borrow besides
/// the transaction: things that live for `'a`, which outlive the
/// transaction's `'t`. The type carries that bound into the action's
/// higher-ranked signature, so that an action may borrow the tool's
/// `&self` and arguments, as `#[idempotent(.., transaction)]` needs.
pub type Scope<'t, 'a> = std::marker::PhantomData<&'t &'a ()>;

impl Sealed for PostgresStore {}

impl TransactionalStore for PostgresStore {
    type Transaction<'t> = Transaction<'t>;
    type Acted<'t, R> = TransactionFuture<'t, R>;

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(PostgresStore {
            inner: Arc::clone(&self.inner),
        })
    }

    fn transact<T, E, F>(
        &self,
        trip: Trip,
        action: F,
    ) -> impl Future<Output = Transacted<T, E>> + Send
    where
        F: for<'t> FnOnce(&'t Transaction<'t>) -> TransactionFuture<'t, Result<T, E>>
            + Send
            + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: Send + 'static,
    {
        self.transact_in_scope(trip, move |tx, _| action(tx))
    }
}

impl PostgresStore {
    /// Runs `action` in a transaction on a connection of the pool,
    /// completes the trip's claim in it and commits. The action may borrow
    /// what lives for `'a` (see [`Scope`]).
    pub(crate) async fn transact_in_scope<'a, T, E, F>(
        &'a self,
        mut trip: Trip,
        action: F,
    ) -> Transacted<T, E>
    where
        F: for<'t> FnOnce(
                &'t Transaction<'t>,
                Scope<'t, 'a>,
            ) -> TransactionFuture<'t, Result<T, E>>
            + 'a,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let mut client = match self.connection().await {
            Ok(client) => client,
            Err(cause) => return Transacted::NotBegun(cause),
        };
        let tx = match client.transaction().await {
            Ok(tx) => tx,
            Err(cause) => return Transacted::NotBegun(transaction_error("begin", cause)),
        };
        let acted = {
            let mut acted = pin!(action(&tx, std::marker::PhantomData));
            std::future::poll_fn(|cx| {
                let mut polled = Poll::Pending;
                trip.act_as(&mut || polled = acted.as_mut().poll(cx));
                polled
            })
            .await
        };
        let value = match acted {
            Ok(value) => value,
            Err(err) => {
                let _ = tx.rollback().await;
                return Transacted::Failed(err);
            }
        };
        trip.stop_renewing();
        let completion = Completion {
            state: RecordState::Done,
            value: RecordValue::typed(value.clone()),
            completed_at: SystemTime::now(),
        };
        let cause = match self.complete_in(&tx, trip.claim(), &completion).await {
            Ok(0) => Some((StoreError::LeaseLost, false)),
            Ok(_) => None,
            Err(cause) => Some((cause, true)),
        };
        if let Some((cause, still_mine)) = cause {
            let _ = tx.rollback().await;
            return Transacted::RolledBack { cause, still_mine };
        }
        match tx.commit().await {
            Ok(()) => Transacted::Committed(value),
            Err(failed) => {
                drop(client);
                let cause = transaction_error("commit", failed);
                // Still held: the commit, which would have completed it, did
                // not happen. Otherwise it may have.
                match self.still_holds(trip.claim()).await {
                    Ok(true) => Transacted::RolledBack {
                        cause,
                        still_mine: true,
                    },
                    _ => Transacted::MaybeCommitted { cause, value },
                }
            }
        }
    }

    /// A connection of the store's pool, for the action's transaction.
    async fn connection(&self) -> StoreResult<deadpool_postgres::Object> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| Broken::pool(e).into_store_error("begin"))
    }

    /// Completes `claim` inside `tx`: the same statement, fenced on owner
    /// and fence, as the store's own completion. Returns the rows changed:
    /// zero if the claim is no longer held by its owner at its fence.
    ///
    /// Always the synchronous completion: the record commits with the
    /// action's writes, and those are flushed as the application asked.
    async fn complete_in(
        &self,
        tx: &Transaction<'_>,
        claim: &Claim,
        completion: &Completion,
    ) -> StoreResult<u64> {
        let json = completion.value.to_json()?.into_owned();
        let done = CompletionRow {
            state: completion.state.as_str(),
            json,
            completed_at: completion.completed_at,
            retention: claim.retention,
        };
        let holder = Holder::of(claim);
        let owner = holder.owner_bytes();
        let params: [&(dyn ToSql + Sync); 8] = [
            &holder.digest.as_slice(),
            &owner.as_slice(),
            &holder.fence_column(),
            &done.state,
            &done.json.as_str(),
            &done.completed_at,
            &encode::millis(done.retention),
            &NOTIFY_CHANNEL,
        ];
        let statement = sql::COMPLETE;
        let run = async {
            let prepared = tx.prepare(statement.sql).await?;
            self.inner.statements.fetch_add(1, Ordering::Relaxed);
            Ok::<_, Broken>(tx.execute(&prepared, &params).await?)
        };
        run.await.map_err(|b| b.into_store_error(statement.name))
    }

    /// Whether `claim` is still held by its owner at its fence, so that a
    /// transaction whose commit failed is known not to have committed.
    async fn still_holds(&self, claim: &Claim) -> StoreResult<bool> {
        Ok(self.inner.held_by(&Holder::of(claim)).await?.is_some())
    }
}

/// Turns a failed `BEGIN`, `COMMIT` or `ROLLBACK` into a store error.
fn transaction_error(statement: &'static str, err: tokio_postgres::Error) -> StoreError {
    Broken::from(err).into_store_error(statement)
}
