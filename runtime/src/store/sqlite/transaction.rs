//! A call in the action's own transaction, the SQLite store's half: one
//! trip to the blocking pool that opens the transaction, runs the action in
//! it, writes the fenced completion in it and commits.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use rusqlite::{Transaction, TransactionBehavior, params};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::SqliteStore;
use super::error::store_error;
use super::sql;
use crate::store::durable::{Holder, encode};
use crate::store::record::RecordState;
use crate::store::record::RecordValue;
use crate::store::transaction::sealed::Sealed;
use crate::store::transaction::{Transacted, TransactionalStore, Trip};
use crate::store::{Store, StoreError, StoreResult};

impl Sealed for SqliteStore {}

impl TransactionalStore for SqliteStore {
    type Transaction<'t> = Transaction<'t>;
    type Acted<'t, R> = R;

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore {
            inner: Arc::clone(&self.inner),
        })
    }

    /// Runs `action` in a transaction on this store's file, then completes
    /// the trip's claim in that transaction (fenced on owner and fence, as
    /// the store's own completion) and commits: one trip to the blocking
    /// pool.
    ///
    /// The transaction is `IMMEDIATE`: it takes the file's write lock
    /// before the action runs, so nobody can take the claim over while the
    /// action writes (no renewal is needed, and one would only wait on that
    /// lock), and the action's reads see what its writes overwrite. If the
    /// call is dropped by the time the completion is written, the
    /// transaction rolls back instead of committing.
    fn transact<T, E, F>(
        &self,
        mut trip: Trip,
        action: F,
    ) -> impl Future<Output = Transacted<T, E>> + Send
    where
        F: for<'t> FnOnce(&'t Transaction<'t>) -> Result<T, E> + Send + 'static,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: Send + 'static,
    {
        trip.stop_renewing();
        let abandoned = Abandoned::default();
        let inner = Arc::clone(&self.inner);
        async move {
            let mut conn = match inner.pool.get().await {
                Ok(conn) => conn,
                Err(e) => return Transacted::NotBegun(StoreError::Unavailable(Box::new(e))),
            };
            inner.statements.fetch_add(1, Ordering::Relaxed);
            let holder = Holder::of(trip.claim());
            let retention = encode::millis(trip.claim().retention);
            let act_as = trip.act_as_owned();
            let dropped = Arc::clone(&abandoned.0);
            let blocking = tokio::task::spawn_blocking(move || {
                let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
                    Ok(tx) => tx,
                    Err(cause) => return Transacted::NotBegun(store_error(cause)),
                };
                if dropped.load(Ordering::SeqCst) {
                    // Dropped before the action ran: it does not run.
                    return Transacted::NotBegun(StoreError::Backend(
                        "the call was dropped".into(),
                    ));
                }
                // Run as the key's action, so that `current_key` names it.
                let mut action = Some(action);
                let mut acted = None;
                act_as(&mut || acted = action.take().map(|action| action(&tx)));
                let value = match acted {
                    Some(Ok(value)) => value,
                    // Dropped, the transaction rolls back.
                    Some(Err(err)) => return Transacted::Failed(err),
                    None => {
                        return Transacted::NotBegun(StoreError::Backend(
                            "the action was not run".into(),
                        ));
                    }
                };
                let rolled_back = |cause, still_mine| Transacted::RolledBack { cause, still_mine };
                match complete_in(&tx, &holder, &value, retention) {
                    Ok(0) => return rolled_back(StoreError::LeaseLost, false),
                    Ok(_) => {}
                    Err(cause) => return rolled_back(cause, true),
                }
                if dropped.load(Ordering::SeqCst) {
                    return rolled_back(StoreError::Backend("the call was dropped".into()), true);
                }
                match tx.commit() {
                    Ok(()) => Transacted::Committed(value),
                    // A `COMMIT` that fails leaves the transaction to roll back.
                    Err(cause) => rolled_back(store_error(cause), true),
                }
            });
            match blocking.await {
                Ok(ended) => {
                    if let Transacted::Committed(_) = ended {
                        // Waiters in this process look again at once.
                        inner.settle();
                    }
                    drop(abandoned);
                    ended
                }
                // The action panicked: the transaction rolled back as it
                // unwound, and the panic goes on to the caller, as from any
                // action.
                Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
                Err(join) => Transacted::NotBegun(StoreError::Backend(Box::new(join))),
            }
        }
    }
}

/// Set when the call that owns it is dropped, so that its transaction, on
/// the blocking pool, rolls back instead of committing.
#[derive(Default)]
struct Abandoned(Arc<AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
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
