//! The SQLite store's steps: claims, completions, releases and renewals
//! on the writer, everything else one trip to the blocking pool; each
//! statement atomic in SQLite.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use deadpool::unmanaged::Pool;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::watch;

use super::error::store_error;
use super::rows::{RawRecord, read_record};
use super::sql;
use super::writer::{Done, Step, Writer};
use crate::key::Key;
use crate::store::durable::wait::{self, Backoff, Wakeup};
use crate::store::durable::{Backend, CompletionRow, Forgotten, Found, Holder, Resolved, encode};
use crate::tool::ToolId;
use crate::{
    store::record::RecordState,
    store::records::{Record, RecordCount, RecordQuery},
    store::{ClaimRequest, StoreError, StoreResult, Wait},
};

/// A SQLite store's state, shared with its waiters.
pub struct Inner {
    /// Connections for reads, purges, forgets and the action's own
    /// transactions.
    pub(super) pool: Pool<Connection>,
    /// The connection every claim, completion, release and renewal runs
    /// on, batched.
    pub(super) writer: Writer,
    pub(super) path: PathBuf,
    pub(super) statements: AtomicU64,
    /// Bumped whenever this store completes or releases a claim, so waiters
    /// in this process look again at once instead of at their next poll.
    pub(super) settled: watch::Sender<u64>,
    pub(super) poll_first: Duration,
    pub(super) poll_max: Duration,
    pub(super) purge_batch: usize,
}

fn now_millis() -> i64 {
    encode::unix_millis(SystemTime::now())
}

impl Inner {
    /// Runs `work` with a pooled connection on the blocking pool.
    async fn run<T, F>(&self, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self
            .pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        self.statements.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || work(&conn))
            .await
            .map_err(|e| StoreError::Backend(Box::new(e)))?
            .map_err(store_error)
    }

    /// Runs a claim, completion, release or renewal on the writer, with
    /// whatever other steps are waiting.
    async fn write(&self, step: Step) -> StoreResult<Done> {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.writer.run(step).await
    }

    /// Runs a completion, release or renewal on the writer; the rows it
    /// changed.
    async fn changed(&self, step: Step) -> StoreResult<usize> {
        match self.write(step).await? {
            Done::Changed(changed) => Ok(changed),
            Done::Claimed(..) => Err(mismatched()),
        }
    }

    pub(super) fn settle(&self) {
        self.settled.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wakes this process's waiters if a claim was let go.
    fn settle_if(&self, changed: usize) -> StoreResult<u64> {
        if changed > 0 {
            self.settle();
        }
        Ok(changed as u64)
    }
}

/// The writer answered a step with another step's kind of answer.
fn mismatched() -> StoreError {
    StoreError::Backend("the SQLite writer answered a step with another step's answer".into())
}

/// Wakes a waiter in this process as soon as this store lets a claim go.
pub struct Settled(watch::Receiver<u64>);

impl Wakeup for Settled {
    const CONCLUSIVE: bool = false;

    async fn woken(&mut self) {
        // The sender lives in the store's state, which the waiter holds.
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Backend for Inner {
    const KIND: &'static str = "sqlite";

    type Subscription = Settled;

    fn subscribe(&self, _digest: [u8; 32]) -> Settled {
        Settled(self.settled.subscribe())
    }

    async fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>, owner: u128) -> StoreResult<Found> {
        let step = Step::Claim {
            digest: req.key.digest(),
            key_text: req.key.as_str().to_owned(),
            tool: req.tool.as_str().to_owned(),
            fingerprint: *req.fingerprint.as_bytes(),
            owner: encode::owner_bytes(owner),
            lease: encode::millis(req.lease),
            retention: encode::millis(req.retention),
        };
        match self.write(step).await? {
            Done::Claimed(returned, now, mut undo) => {
                let found = returned.found(owner, now);
                if found.is_ok() {
                    undo.disarm();
                }
                found
            }
            Done::Changed(_) => Err(mismatched()),
        }
    }

    /// Woken at once by a completion or release in this process, and
    /// otherwise by polling with backoff, looking again just after the
    /// holder's lease would run out.
    fn wait(self: Arc<Self>, settled: Settled, holder: Holder, lease_left: Duration) -> Wait {
        Wait::new(async move {
            let backoff = Backoff::new(self.poll_first, self.poll_max);
            wait::until_let_go(&*self, &holder, lease_left, backoff, settled).await;
        })
    }

    async fn held_by<'a>(&'a self, holder: &'a Holder) -> StoreResult<Option<Duration>> {
        let Holder { digest, .. } = *holder;
        let (owner, fence) = (holder.owner_bytes(), holder.fence_column());
        let lease_until = self
            .run(move |conn| {
                conn.prepare_cached(sql::HELD_BY)?
                    .query_row(params![digest.as_slice(), owner.as_slice(), fence], |r| {
                        r.get::<_, Option<i64>>(0)
                    })
                    .optional()
            })
            .await?
            .flatten();
        let now = now_millis();
        Ok(lease_until
            .filter(|until| *until > now)
            .map(|until| encode::from_millis(until - now)))
    }

    async fn complete(&self, holder: Holder, done: CompletionRow) -> StoreResult<u64> {
        let changed = self
            .changed(Step::Complete {
                digest: holder.digest,
                owner: holder.owner_bytes(),
                fence: holder.fence_column(),
                state: done.state,
                json: done.json,
                completed_at: encode::unix_millis(done.completed_at),
                retention: encode::millis(done.retention),
            })
            .await?;
        self.settle_if(changed)
    }

    async fn release(&self, holder: Holder) -> StoreResult<u64> {
        let changed = self
            .changed(Step::Release {
                digest: holder.digest,
                owner: holder.owner_bytes(),
                fence: holder.fence_column(),
            })
            .await?;
        self.settle_if(changed)
    }

    async fn renew(
        &self,
        holder: Holder,
        lease: Duration,
        retention: Duration,
    ) -> StoreResult<u64> {
        let changed = self
            .changed(Step::Renew {
                digest: holder.digest,
                owner: holder.owner_bytes(),
                fence: holder.fence_column(),
                lease: encode::millis(lease),
                retention: encode::millis(retention),
            })
            .await?;
        Ok(changed as u64)
    }

    fn purge_batch(&self) -> usize {
        self.purge_batch
    }

    async fn purge_some(&self) -> StoreResult<u64> {
        let limit = i64::try_from(self.purge_batch).unwrap_or(i64::MAX);
        let deleted = self
            .run(move |conn| {
                conn.prepare_cached(sql::PURGE)?
                    .execute(params![now_millis(), limit])
            })
            .await?;
        Ok(deleted as u64)
    }

    async fn forget(&self, digest: [u8; 32], force: bool) -> StoreResult<Forgotten> {
        let forgotten = self
            .run(move |conn| {
                let deleted = conn.prepare_cached(sql::FORGET)?.execute(params![
                    digest.as_slice(),
                    now_millis(),
                    force
                ])?;
                if deleted > 0 {
                    return Ok(Forgotten {
                        removed: true,
                        live: false,
                    });
                }
                let live = conn
                    .prepare_cached(sql::HELD)?
                    .exists(params![digest.as_slice()])?;
                Ok(Forgotten {
                    removed: false,
                    live,
                })
            })
            .await?;
        if forgotten.removed {
            // A forced claim's waiters in this process look again.
            self.settle();
        }
        Ok(forgotten)
    }

    async fn resolve(&self, digest: [u8; 32], applied: Option<String>) -> StoreResult<Resolved> {
        // `None`: resolved; otherwise the state left under the key, if any.
        let left = self
            .run(move |conn| {
                // The write checks the state; the read after it, in the same
                // transaction, only says why it changed nothing.
                let tx = conn.unchecked_transaction()?;
                let now = now_millis();
                let changed = match &applied {
                    Some(json) => tx.prepare_cached(sql::RESOLVE_APPLIED)?.execute(params![
                        digest.as_slice(),
                        now,
                        json
                    ])?,
                    None => tx
                        .prepare_cached(sql::RESOLVE_NOT_APPLIED)?
                        .execute(params![digest.as_slice(), now])?,
                };
                let left = if changed > 0 {
                    None
                } else {
                    Some(
                        tx.prepare_cached(sql::RESOLVE_FOUND)?
                            .query_row(params![digest.as_slice(), now], |r| r.get::<_, String>(0))
                            .optional()?,
                    )
                };
                tx.commit()?;
                Ok(left)
            })
            .await?;
        match left {
            None => {
                // A resolved claim's waiters in this process look again.
                self.settle();
                Ok(Resolved::Changed)
            }
            Some(None) => Ok(Resolved::Missing),
            Some(Some(state)) => match encode::record_state(&state)? {
                RecordState::Held => Ok(Resolved::Live),
                known => Ok(Resolved::Known(known)),
            },
        }
    }

    async fn list<'a>(&'a self, query: &'a RecordQuery, limit: i64) -> StoreResult<Vec<Record>> {
        let state = query.state.map(RecordState::as_str);
        let tool = query.tool.clone();
        let run = query.run.clone();
        let prefix = query.key_prefix.clone();
        let before = query
            .older_than
            .map(|age| now_millis().saturating_sub(encode::millis(age)));
        let after = query.after.clone();
        let raw = self
            .run(move |conn| {
                conn.prepare_cached(sql::LIST)?
                    .query_map(
                        params![state, tool, run, before, after, limit, prefix],
                        read_record,
                    )?
                    .collect::<rusqlite::Result<Vec<RawRecord>>>()
            })
            .await?;
        raw.into_iter().map(RawRecord::into_record).collect()
    }

    async fn inspect<'a>(&'a self, key: &'a Key) -> StoreResult<Option<Record>> {
        let digest = key.digest();
        let raw = self
            .run(move |conn| {
                conn.prepare_cached(sql::INSPECT)?
                    .query_row(params![digest.as_slice()], read_record)
                    .optional()
            })
            .await?;
        raw.map(RawRecord::into_record).transpose()
    }

    async fn count(&self) -> StoreResult<Vec<RecordCount>> {
        let rows = self
            .run(move |conn| {
                conn.prepare_cached(sql::COUNT)?
                    .query_map([], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, i64>(2)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        rows.into_iter()
            .map(|(tool, state, count)| {
                Ok(RecordCount::new(
                    ToolId::owned(tool),
                    encode::record_state(&state)?,
                    u64::try_from(count).unwrap_or(0),
                ))
            })
            .collect()
    }
}
