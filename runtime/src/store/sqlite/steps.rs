//! The SQLite store's steps: each one trip to the blocking pool, each
//! statement atomic in SQLite.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use deadpool::unmanaged::Pool;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::watch;

use super::error::store_error;
use super::rows::{RawRecord, read_record, read_returned};
use super::sql;
use crate::key::Key;
use crate::store::durable::wait::{self, Backoff, Wakeup};
use crate::store::durable::{Backend, CompletionRow, Forgotten, Found, Holder, encode};
use crate::tool::ToolId;
use crate::{
    store::records::{Record, RecordCount, RecordQuery, RecordState},
    store::{ClaimRequest, StoreError, StoreResult, Wait},
};

/// A SQLite store's state, shared with its waiters.
pub struct Inner {
    pub(super) pool: Pool<Connection>,
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
        let digest = req.key.digest();
        let key_text = req.key.clone();
        let tool = req.tool.as_str().to_owned();
        let fingerprint = *req.fingerprint.as_bytes();
        let lease = encode::millis(req.lease);
        let retention = encode::millis(req.retention);
        let owner_bytes = encode::owner_bytes(owner);
        let (returned, now) = self
            .run(move |conn| {
                let now = now_millis();
                // A completed record stays finished until it expires, so a
                // read may answer a replay; it takes no write lock and costs
                // no disk sync. Anything else goes to the atomic claim.
                let finished = conn
                    .prepare_cached(sql::PEEK_COMPLETED)?
                    .query_row(params![digest.as_slice(), now], read_returned)
                    .optional()?;
                let returned = match finished {
                    Some(finished) => finished,
                    None => conn.prepare_cached(sql::CLAIM)?.query_row(
                        params![
                            digest.as_slice(),
                            key_text.as_str(),
                            tool,
                            fingerprint.as_slice(),
                            owner_bytes.as_slice(),
                            now,
                            lease,
                            retention
                        ],
                        read_returned,
                    )?,
                };
                Ok((returned, now))
            })
            .await?;
        returned.found(owner, now)
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
        let Holder { digest, .. } = holder;
        let (owner, fence) = (holder.owner_bytes(), holder.fence_column());
        let completed_at = encode::unix_millis(done.completed_at);
        let retention = encode::millis(done.retention);
        let changed = self
            .run(move |conn| {
                conn.prepare_cached(sql::COMPLETE)?.execute(params![
                    digest.as_slice(),
                    owner.as_slice(),
                    fence,
                    done.state,
                    done.json,
                    completed_at,
                    now_millis(),
                    retention
                ])
            })
            .await?;
        self.settle_if(changed)
    }

    async fn release(&self, holder: Holder) -> StoreResult<u64> {
        let Holder { digest, .. } = holder;
        let (owner, fence) = (holder.owner_bytes(), holder.fence_column());
        let changed = self
            .run(move |conn| {
                conn.prepare_cached(sql::RELEASE)?.execute(params![
                    digest.as_slice(),
                    owner.as_slice(),
                    fence
                ])
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
        let Holder { digest, .. } = holder;
        let (owner, fence) = (holder.owner_bytes(), holder.fence_column());
        let (lease, retention) = (encode::millis(lease), encode::millis(retention));
        let changed = self
            .run(move |conn| {
                conn.prepare_cached(sql::RENEW)?.execute(params![
                    digest.as_slice(),
                    owner.as_slice(),
                    fence,
                    now_millis(),
                    lease,
                    retention
                ])
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

    async fn list<'a>(&'a self, query: &'a RecordQuery, limit: i64) -> StoreResult<Vec<Record>> {
        let state = query.state.map(RecordState::as_str);
        let tool = query.tool.clone();
        let run = query.run.clone();
        let before = query
            .older_than
            .map(|age| now_millis().saturating_sub(encode::millis(age)));
        let after = query.after.clone();
        let raw = self
            .run(move |conn| {
                conn.prepare_cached(sql::LIST)?
                    .query_map(params![state, tool, run, before, after, limit], read_record)?
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
