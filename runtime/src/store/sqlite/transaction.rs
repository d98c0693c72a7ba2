//! The steps a call in the action's own transaction needs from the SQLite
//! store: one trip to the blocking pool that opens the transaction, runs
//! the action in it, writes the fenced completion in it and commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use rusqlite::{Transaction, TransactionBehavior, params};

use super::SqliteStore;
use super::error::store_error;
use super::sql;
use crate::store::durable::{Holder, encode};
use crate::store::record::RecordValue;
use crate::store::records::RecordState;
use crate::store::{Claim, Store, StoreError, StoreResult};

/// How the action's transaction ended.
pub(crate) enum Ended<T, E> {
    /// The action's writes and its record committed together.
    Committed(T),
    /// The transaction could not begin: the action did not run.
    NotBegun(StoreError),
    /// The action returned `Err`; its writes rolled back.
    Failed(E),
    /// The action ran, then its transaction rolled back, for `cause`.
    /// `still_mine` if the claim is still this holder's (otherwise it was
    /// taken over, and the fence refused the completion).
    RolledBack { cause: StoreError, still_mine: bool },
}

impl SqliteStore {
    /// The same store, shared, as the call's store.
    pub(crate) fn shared(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore {
            inner: Arc::clone(&self.inner),
        })
    }

    /// Runs `action` in a transaction on this store's file, then completes
    /// `claim` in that transaction (fenced on owner and fence, as the
    /// store's own completion) and commits: one trip to the blocking pool.
    ///
    /// The transaction is `IMMEDIATE`: it takes the file's write lock
    /// before the action runs, so nobody can take the claim over while the
    /// action writes, and the action's reads see what its writes overwrite.
    /// If `abandoned` is set by the time the completion is written, the
    /// call was dropped: the transaction rolls back instead of committing.
    pub(crate) async fn in_transaction<T, E, F>(
        &self,
        claim: &Claim,
        action: F,
        abandoned: Arc<AtomicBool>,
    ) -> Ended<T, E>
    where
        F: for<'t> FnOnce(&'t Transaction<'t>) -> Result<T, E> + Send + 'static,
        T: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
        E: Send + 'static,
    {
        let mut conn = match self.inner.pool.get().await {
            Ok(conn) => conn,
            Err(e) => return Ended::NotBegun(StoreError::Unavailable(Box::new(e))),
        };
        self.inner.statements.fetch_add(1, Ordering::Relaxed);
        let holder = Holder::of(claim);
        let retention = encode::millis(claim.retention);
        let trip = tokio::task::spawn_blocking(move || {
            let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
                Ok(tx) => tx,
                Err(cause) => return Ended::NotBegun(store_error(cause)),
            };
            if abandoned.load(Ordering::SeqCst) {
                // Dropped before the action ran: it does not run.
                return Ended::NotBegun(StoreError::Backend("the call was dropped".into()));
            }
            let value = match action(&tx) {
                Ok(value) => value,
                // Dropped, the transaction rolls back.
                Err(err) => return Ended::Failed(err),
            };
            let rolled_back = |cause, still_mine| Ended::RolledBack { cause, still_mine };
            match complete_in(&tx, &holder, &value, retention) {
                Ok(0) => return rolled_back(StoreError::LeaseLost, false),
                Ok(_) => {}
                Err(cause) => return rolled_back(cause, true),
            }
            if abandoned.load(Ordering::SeqCst) {
                return rolled_back(StoreError::Backend("the call was dropped".into()), true);
            }
            match tx.commit() {
                Ok(()) => Ended::Committed(value),
                // A `COMMIT` that fails leaves the transaction to roll back.
                Err(cause) => rolled_back(store_error(cause), true),
            }
        });
        match trip.await {
            Ok(ended) => {
                if let Ended::Committed(_) = ended {
                    // Waiters in this process look again at once.
                    self.inner.settle();
                }
                ended
            }
            // The action panicked: the transaction rolled back as it unwound,
            // and the panic goes on to the caller, as from any action.
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(join) => Ended::NotBegun(StoreError::Backend(Box::new(join))),
        }
    }
}

/// Completes the claim `holder` holds inside `tx`, with `value` as its
/// result. Returns the rows changed: zero if the claim is no longer held by
/// its owner at its fence.
fn complete_in<T>(
    tx: &Transaction<'_>,
    holder: &Holder,
    value: &T,
    retention: i64,
) -> StoreResult<usize>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    let record = RecordValue::typed(value.clone());
    let json = record.to_json()?;
    let now = encode::unix_millis(SystemTime::now());
    tx.prepare_cached(sql::COMPLETE)
        .and_then(|mut statement| {
            statement.execute(params![
                holder.digest.as_slice(),
                holder.owner_bytes().as_slice(),
                holder.fence_column(),
                RecordState::Done.as_str(),
                json.as_ref(),
                now,
                now,
                retention
            ])
        })
        .map_err(store_error)
}
