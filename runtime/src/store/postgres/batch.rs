//! Claims and completions coalesced: those that arrive while others are on
//! the wire go together in one statement over arrays ([`sql::CLAIM_MANY`],
//! [`sql::COMPLETE_MANY`]); one that arrives alone goes at once, as the
//! single-key statement.
//!
//! Each member of a batch gets its own answer. A batch whose statement the
//! server refuses is run again member by member, each with the single-key
//! statement, so that one member's input (a value the server refuses)
//! fails only that member; a batch whose server stays unreachable fails
//! each member as unavailable at once. A claim made for a caller that is
//! gone is released at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use tokio_postgres::types::ToSql;

use super::Inner;
use super::NOTIFY_CHANNEL;
use super::error::corrupt;
use super::rows::read_claim;
use super::sql;
use crate::store::durable::coalesce::{Ask, Coalescer, Limits, Member};
use crate::store::durable::{Backend, CompletionRow, Found, Holder, encode};
use crate::store::{ClaimRequest, StoreError, StoreResult};

/// The coalescers of one store, one per kind of step.
pub(super) struct Batches {
    pub(super) claims: Arc<Coalescer<ClaimAsk, StoreResult<Claimed>>>,
    pub(super) completions: Arc<Coalescer<CompleteAsk, StoreResult<u64>>>,
}

impl Batches {
    pub(super) fn new(limits: Limits) -> Batches {
        Batches {
            claims: Arc::new(Coalescer::new(limits)),
            completions: Arc::new(Coalescer::new(limits)),
        }
    }
}

/// A claim as a batch carries it: owned, since the batch outlives the call.
pub(super) struct ClaimAsk {
    digest: [u8; 32],
    key: String,
    tool: String,
    fingerprint: [u8; 16],
    owner: [u8; 16],
    lease: i64,
    retention: i64,
}

impl ClaimAsk {
    pub(super) fn new(req: &ClaimRequest<'_>, owner: u128) -> ClaimAsk {
        ClaimAsk {
            digest: req.key.digest(),
            key: req.key.as_str().to_owned(),
            tool: req.tool.as_str().to_owned(),
            fingerprint: *req.fingerprint.as_bytes(),
            owner: encode::owner_bytes(owner),
            lease: encode::millis(req.lease),
            retention: encode::millis(req.retention),
        }
    }

    fn holder(&self, fence: u64) -> Holder {
        Holder {
            digest: self.digest,
            owner: u128::from_be_bytes(self.owner),
            fence,
        }
    }
}

impl Ask for ClaimAsk {
    type Key = [u8; 32];
    fn key(&self) -> [u8; 32] {
        self.digest
    }
}

/// What a claim in a batch got: the claim (released if its caller is
/// gone), someone else's row, or nothing to go on: the key changed under
/// the statement, and the claim runs again.
pub(super) enum Claimed {
    Mine(Won),
    Other(Found),
    Again,
}

/// A claim a batch made. Dropped undelivered (its caller is gone), it is
/// released, as the guard releases a claim nobody will use.
pub(super) struct Won {
    store: Option<Arc<Inner>>,
    /// The runtime the batch ran on: the release goes there, wherever the
    /// answer is dropped.
    runtime: Option<tokio::runtime::Handle>,
    holder: Holder,
    taken_over: bool,
}

impl Won {
    /// The claim, now the caller's to keep.
    pub(super) fn keep(mut self) -> Found {
        self.store = None;
        Found::Mine {
            fence: self.holder.fence,
            taken_over: self.taken_over,
        }
    }
}

impl Drop for Won {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        let holder = self.holder;
        if let Some(runtime) = self.runtime.take() {
            // Fenced: it deletes only this owner's claim at this fence.
            drop(runtime.spawn(async move { store.release(holder).await }));
        }
    }
}

/// Runs one batch of claims and answers each member.
pub(super) async fn claims(
    store: Arc<Inner>,
    mut batch: Vec<Member<ClaimAsk, StoreResult<Claimed>>>,
) {
    if batch.len() == 1 {
        if let Some(member) = batch.pop() {
            let answer = claim_one(&store, &member.ask).await;
            member.answer(answer);
        }
        return;
    }
    // In key order: the insertions of two batches take the keys they share
    // in the same order. (A takeover's update locks its rows in whatever
    // order the server joins them, so two batches can still deadlock; the
    // server then fails one, and its members go again alone.)
    batch.sort_by_key(|m| m.ask.digest);
    let asks: Vec<&ClaimAsk> = batch.iter().map(|m| &m.ask).collect();
    let digests: Vec<&[u8]> = asks.iter().map(|a| a.digest.as_slice()).collect();
    let keys: Vec<&str> = asks.iter().map(|a| a.key.as_str()).collect();
    let tools: Vec<&str> = asks.iter().map(|a| a.tool.as_str()).collect();
    let fingerprints: Vec<&[u8]> = asks.iter().map(|a| a.fingerprint.as_slice()).collect();
    let owners: Vec<&[u8]> = asks.iter().map(|a| a.owner.as_slice()).collect();
    let leases: Vec<i64> = asks.iter().map(|a| a.lease).collect();
    let retentions: Vec<i64> = asks.iter().map(|a| a.retention).collect();
    let params: [&(dyn ToSql + Sync); 7] = [
        &digests,
        &keys,
        &tools,
        &fingerprints,
        &owners,
        &leases,
        &retentions,
    ];
    let rows = store.query_answered(sql::CLAIM_MANY, &params).await;
    let mut found: HashMap<usize, StoreResult<Option<Found>>> = HashMap::new();
    match rows {
        Ok(rows) => {
            for row in &rows {
                let i = match row.try_get::<_, i64>("i").map_err(corrupt) {
                    Ok(i) => usize::try_from(i).unwrap_or(0),
                    Err(_) => continue,
                };
                found.insert(i, read_claim(row));
            }
        }
        Err((error, false)) => return unreached(batch, error),
        Err((_, true)) => {
            // One member's input may have failed them all: each alone, all
            // at once, so that one that waits (on a lock, a timeout) again
            // holds up none of the others.
            let store = &store;
            futures_util::future::join_all(batch.into_iter().map(|member| async move {
                let answer = claim_one(store, &member.ask).await;
                member.answer(answer);
            }))
            .await;
            return;
        }
    }
    for (i, member) in batch.into_iter().enumerate() {
        let answer = match found.remove(&(i + 1)) {
            Some(Ok(Some(found))) => Ok(claimed(&store, &member.ask, found)),
            Some(Err(e)) => Err(e),
            Some(Ok(None)) | None => Ok(Claimed::Again),
        };
        member.answer(answer);
    }
}

/// One claim, with the single-key statement.
async fn claim_one(store: &Arc<Inner>, ask: &ClaimAsk) -> StoreResult<Claimed> {
    let params: [&(dyn ToSql + Sync); 7] = [
        &ask.digest.as_slice(),
        &ask.key.as_str(),
        &ask.tool.as_str(),
        &ask.fingerprint.as_slice(),
        &ask.owner.as_slice(),
        &ask.lease,
        &ask.retention,
    ];
    let rows = store.query(sql::CLAIM, &params).await?;
    Ok(match rows.first().map(read_claim).transpose()?.flatten() {
        Some(found) => claimed(store, ask, found),
        None => Claimed::Again,
    })
}

fn claimed(store: &Arc<Inner>, ask: &ClaimAsk, found: Found) -> Claimed {
    match found {
        Found::Mine { fence, taken_over } => Claimed::Mine(Won {
            store: Some(Arc::clone(store)),
            runtime: tokio::runtime::Handle::try_current().ok(),
            holder: ask.holder(fence),
            taken_over,
        }),
        other => Claimed::Other(other),
    }
}

/// A completion as a batch carries it.
pub(super) struct CompleteAsk {
    holder: Holder,
    state: &'static str,
    json: String,
    completed_at: SystemTime,
    retention: i64,
}

impl CompleteAsk {
    pub(super) fn new(holder: Holder, done: CompletionRow) -> CompleteAsk {
        CompleteAsk {
            holder,
            state: done.state,
            json: done.json,
            completed_at: done.completed_at,
            retention: encode::millis(done.retention),
        }
    }
}

impl Ask for CompleteAsk {
    type Key = [u8; 32];
    fn key(&self) -> [u8; 32] {
        self.holder.digest
    }
}

/// Runs one batch of completions and answers each member with the rows
/// it changed.
pub(super) async fn completions(
    store: Arc<Inner>,
    mut batch: Vec<Member<CompleteAsk, StoreResult<u64>>>,
) {
    if batch.len() == 1 {
        if let Some(member) = batch.pop() {
            let answer = complete_one(&store, &member.ask).await;
            member.answer(answer);
        }
        return;
    }
    batch.sort_by_key(|m| m.ask.holder.digest);
    let asks: Vec<&CompleteAsk> = batch.iter().map(|m| &m.ask).collect();
    let digests: Vec<&[u8]> = asks.iter().map(|a| a.holder.digest.as_slice()).collect();
    let owners: Vec<[u8; 16]> = asks.iter().map(|a| a.holder.owner_bytes()).collect();
    let owners: Vec<&[u8]> = owners.iter().map(|o| o.as_slice()).collect();
    let fences: Vec<i64> = asks.iter().map(|a| a.holder.fence_column()).collect();
    let states: Vec<&str> = asks.iter().map(|a| a.state).collect();
    let results: Vec<&str> = asks.iter().map(|a| a.json.as_str()).collect();
    let times: Vec<SystemTime> = asks.iter().map(|a| a.completed_at).collect();
    let retentions: Vec<i64> = asks.iter().map(|a| a.retention).collect();
    let params: [&(dyn ToSql + Sync); 8] = [
        &digests,
        &owners,
        &fences,
        &states,
        &results,
        &times,
        &retentions,
        &NOTIFY_CHANNEL,
    ];
    let statement = if store.asynchronous_completions {
        sql::COMPLETE_MANY_ASYNC
    } else {
        sql::COMPLETE_MANY
    };
    let changed = match store.query_answered(statement, &params).await {
        Ok(rows) => rows
            .iter()
            .map(|row| row.try_get::<_, Vec<u8>>(0).map_err(corrupt))
            .collect::<StoreResult<Vec<Vec<u8>>>>(),
        Err((error, false)) => return unreached(batch, error),
        Err((error, true)) => Err(error),
    };
    match changed {
        Ok(changed) => {
            for member in batch {
                let done = changed
                    .iter()
                    .any(|digest| digest.as_slice() == member.ask.holder.digest.as_slice());
                member.answer(Ok(u64::from(done)));
            }
        }
        Err(_) => {
            // Each alone, all at once, as claims go.
            let store = &store;
            futures_util::future::join_all(batch.into_iter().map(|member| async move {
                let answer = complete_one(store, &member.ask).await;
                member.answer(answer);
            }))
            .await;
        }
    }
}

/// A batch whose server could not be reached for as long as the store
/// tries: every member is told so, none is tried again alone (each would
/// wait as long again).
fn unreached<R, T>(batch: Vec<Member<R, StoreResult<T>>>, error: StoreError) {
    let said = error.to_string();
    // Every member is told the same kind of error: a copy of the first's.
    let backend = matches!(error, StoreError::Backend(_));
    let mut error = Some(error);
    for member in batch {
        let own = error.take().unwrap_or_else(|| {
            if backend {
                StoreError::Backend(said.clone().into())
            } else {
                StoreError::Unavailable(said.clone().into())
            }
        });
        member.answer(Err(own));
    }
}

/// One completion, with the single-key statement.
pub(super) async fn complete_one(store: &Inner, ask: &CompleteAsk) -> StoreResult<u64> {
    let statement = if store.asynchronous_completions {
        sql::COMPLETE_ASYNC
    } else {
        sql::COMPLETE
    };
    let owner = ask.holder.owner_bytes();
    let params: [&(dyn ToSql + Sync); 8] = [
        &ask.holder.digest.as_slice(),
        &owner.as_slice(),
        &ask.holder.fence_column(),
        &ask.state,
        &ask.json.as_str(),
        &ask.completed_at,
        &ask.retention,
        &NOTIFY_CHANNEL,
    ];
    store.execute(statement, &params).await
}
