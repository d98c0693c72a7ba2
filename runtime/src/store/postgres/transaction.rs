//! The steps a call in the action's own transaction needs from the store:
//! a connection to open the transaction on, and the fenced completion run
//! inside it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_postgres::types::ToSql;

use super::NOTIFY_CHANNEL;
use super::PostgresStore;
use super::error::Broken;
use super::sql;
use crate::store::durable::{Backend, CompletionRow, Holder, encode};
use crate::store::record::Completion;
use crate::store::{Claim, Store, StoreResult};

impl PostgresStore {
    /// The same store, shared, as the call's store.
    pub(crate) fn shared(&self) -> Arc<dyn Store> {
        Arc::new(PostgresStore {
            inner: Arc::clone(&self.inner),
        })
    }

    /// A connection of the store's pool, for the action's transaction.
    pub(crate) async fn connection(&self) -> StoreResult<deadpool_postgres::Object> {
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
    pub(crate) async fn complete_in(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
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
    pub(crate) async fn still_holds(&self, claim: &Claim) -> StoreResult<bool> {
        Ok(self.inner.held_by(&Holder::of(claim)).await?.is_some())
    }
}

/// Turns a failed `BEGIN`, `COMMIT` or `ROLLBACK` into a store error.
pub(crate) fn transaction_error(
    statement: &'static str,
    err: tokio_postgres::Error,
) -> crate::store::StoreError {
    Broken::from(err).into_store_error(statement)
}
