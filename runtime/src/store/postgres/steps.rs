//! The Postgres store's steps: each one prepared statement, one round trip.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::batch::{self, ClaimAsk, Claimed, CompleteAsk};
use super::error::corrupt;
use super::rows::{read_claim, read_record};
use super::sql::{self, Statement};
use super::wait::{Subscription, wait_on};
use super::{Inner, NOTIFY_CHANNEL};
use crate::key::Key;
use crate::store::durable::{Backend, CompletionRow, Forgotten, Found, Holder, Resolved, encode};
use crate::tool::ToolId;
use crate::{
    store::record::RecordState,
    store::records::{Record, RecordCount, RecordQuery},
    store::{ClaimRequest, StoreError, StoreResult, Wait},
};

/// How many times a claim is retried when it lost a race in a way that left
/// it nothing to read (see [`sql::CLAIM`]).
const CLAIM_ATTEMPTS: usize = 8;

impl Inner {
    /// A claim with the single-key statement, not coalesced.
    async fn claim_alone(&self, req: &ClaimRequest<'_>, owner: u128) -> StoreResult<Found> {
        let digest = req.key.digest();
        let owner_bytes = encode::owner_bytes(owner);
        let lease = encode::millis(req.lease);
        let retention = encode::millis(req.retention);
        let tool = req.tool.as_str();
        let params: [&(dyn ToSql + Sync); 7] = [
            &digest.as_slice(),
            &req.key.as_str(),
            &tool,
            &req.fingerprint.as_bytes().as_slice(),
            &owner_bytes.as_slice(),
            &lease,
            &retention,
        ];
        for _ in 0..CLAIM_ATTEMPTS {
            let rows = self.query(sql::CLAIM, &params).await?;
            // No row: the colliding claim committed after this statement's
            // snapshot. No verdict: takeable in the snapshot, yet not taken,
            // so the row changed since. Either way, run it again.
            if let Some(found) = rows.first().map(read_claim).transpose()?.flatten() {
                return Ok(found);
            }
        }
        Err(kept_changing(req))
    }

    /// [`Backend::held_by`], marking the row as waited for, so that its
    /// completion or release notifies.
    pub(super) async fn mark_waiting(&self, holder: &Holder) -> StoreResult<Option<Duration>> {
        self.lease_left(sql::MARK_WAITING, holder).await
    }

    async fn lease_left(
        &self,
        statement: Statement,
        holder: &Holder,
    ) -> StoreResult<Option<Duration>> {
        let owner = holder.owner_bytes();
        let params: [&(dyn ToSql + Sync); 3] = [
            &holder.digest.as_slice(),
            &owner.as_slice(),
            &holder.fence_column(),
        ];
        let rows = self.query(statement, &params).await?;
        match rows.first() {
            None => Ok(None),
            Some(found) => {
                let left: i64 = found.try_get(0).map_err(corrupt)?;
                Ok(Some(encode::from_millis(left)))
            }
        }
    }
}

/// A claim that found its key changing under every attempt.
fn kept_changing(req: &ClaimRequest<'_>) -> StoreError {
    StoreError::Backend(
        format!(
            "the claim on key `{}` kept changing under {CLAIM_ATTEMPTS} attempts",
            req.key
        )
        .into(),
    )
}

impl Backend for Inner {
    const KIND: &'static str = "postgres";

    type Subscription = Subscription;

    /// Subscribed before the statement: a completion after it is never
    /// missed, as long as the listener was up when the statement began.
    fn subscribe(&self, digest: [u8; 32]) -> Subscription {
        self.listener.as_ref().map(|listener| {
            let woken = listener.watch(digest);
            let up = listener.is_up();
            if !up {
                listener.ensure();
            }
            (woken, up)
        })
    }

    async fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>, owner: u128) -> StoreResult<Found> {
        let (Some(batches), Some(me)) = (&self.batches, self.me.upgrade()) else {
            return self.claim_alone(req, owner).await;
        };
        for _ in 0..CLAIM_ATTEMPTS {
            let ask = ClaimAsk::new(req, owner);
            let store = Arc::clone(&me);
            let run = move |members| batch::claims(Arc::clone(&store), members);
            match batches.claims.ask(ask, run).await?? {
                Claimed::Mine(won) => return Ok(won.keep()),
                Claimed::Other(found) => return Ok(found),
                // The key changed under the statement: run it again.
                Claimed::Again => {}
            }
        }
        Err(kept_changing(req))
    }

    fn wait(self: Arc<Self>, woken: Subscription, holder: Holder, lease_left: Duration) -> Wait {
        wait_on(self, woken, holder, lease_left)
    }

    async fn held_by<'a>(&'a self, holder: &'a Holder) -> StoreResult<Option<Duration>> {
        self.lease_left(sql::HELD_BY, holder).await
    }

    async fn complete(&self, holder: Holder, done: CompletionRow) -> StoreResult<u64> {
        let ask = CompleteAsk::new(holder, done);
        match (&self.batches, self.me.upgrade()) {
            (Some(batches), Some(me)) => {
                let run = move |members| batch::completions(Arc::clone(&me), members);
                batches.completions.ask(ask, run).await?
            }
            _ => batch::complete_one(self, &ask).await,
        }
    }

    async fn release(&self, holder: Holder) -> StoreResult<u64> {
        let owner = holder.owner_bytes();
        let params: [&(dyn ToSql + Sync); 4] = [
            &holder.digest.as_slice(),
            &owner.as_slice(),
            &holder.fence_column(),
            &NOTIFY_CHANNEL,
        ];
        self.execute(sql::RELEASE, &params).await
    }

    async fn renew(
        &self,
        holder: Holder,
        lease: Duration,
        retention: Duration,
    ) -> StoreResult<u64> {
        let owner = holder.owner_bytes();
        let params: [&(dyn ToSql + Sync); 5] = [
            &holder.digest.as_slice(),
            &owner.as_slice(),
            &holder.fence_column(),
            &encode::millis(lease),
            &encode::millis(retention),
        ];
        self.execute(sql::RENEW, &params).await
    }

    fn purge_batch(&self) -> usize {
        self.purge_batch
    }

    async fn purge_some(&self) -> StoreResult<u64> {
        let batch = i64::try_from(self.purge_batch).unwrap_or(i64::MAX);
        self.execute(sql::PURGE, &[&batch]).await
    }

    async fn forget(&self, digest: [u8; 32], force: bool) -> StoreResult<Forgotten> {
        let params: [&(dyn ToSql + Sync); 3] = [&digest.as_slice(), &force, &NOTIFY_CHANNEL];
        let rows = self.query(sql::FORGET, &params).await?;
        let found = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt("a forget that returned no row".into()))?;
        let forgotten: i64 = found.try_get("forgotten").map_err(corrupt)?;
        Ok(Forgotten {
            removed: forgotten > 0,
            live: found.try_get("held").map_err(corrupt)?,
        })
    }

    async fn resolve(&self, digest: [u8; 32], applied: Option<String>) -> StoreResult<Resolved> {
        let params: [&(dyn ToSql + Sync); 3] = [&digest.as_slice(), &applied, &NOTIFY_CHANNEL];
        let rows = self.query(sql::RESOLVE, &params).await?;
        let found = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt("a resolve that returned no row".into()))?;
        let resolved: i64 = found.try_get("resolved").map_err(corrupt)?;
        if resolved > 0 {
            return Ok(Resolved::Changed);
        }
        let state: Option<String> = found.try_get("found").map_err(corrupt)?;
        match state.as_deref().map(encode::record_state).transpose()? {
            None => Ok(Resolved::Missing),
            Some(RecordState::Held) => Ok(Resolved::Live),
            Some(known) => Ok(Resolved::Known(known)),
        }
    }

    async fn list<'a>(&'a self, query: &'a RecordQuery, limit: i64) -> StoreResult<Vec<Record>> {
        let state = query.state.map(RecordState::as_str);
        let age = query.older_than.map(encode::millis);
        let params: [&(dyn ToSql + Sync); 7] = [
            &state,
            &query.tool,
            &query.run,
            &age,
            &query.after,
            &limit,
            &query.key_prefix,
        ];
        let rows = self.query(sql::LIST, &params).await?;
        rows.iter().map(read_record).collect()
    }

    async fn inspect<'a>(&'a self, key: &'a Key) -> StoreResult<Option<Record>> {
        let digest = key.digest();
        let rows = self.query(sql::INSPECT, &[&digest.as_slice()]).await?;
        rows.first().map(read_record).transpose()
    }

    async fn count(&self) -> StoreResult<Vec<RecordCount>> {
        let rows = self.query(sql::COUNT, &[]).await?;
        rows.iter()
            .map(|found| {
                let tool: String = found.try_get("tool").map_err(corrupt)?;
                let state: String = found.try_get("state").map_err(corrupt)?;
                let n: i64 = found.try_get("n").map_err(corrupt)?;
                Ok(RecordCount::new(
                    ToolId::owned(tool),
                    encode::record_state(&state)?,
                    u64::try_from(n).unwrap_or(0),
                ))
            })
            .collect()
    }
}
