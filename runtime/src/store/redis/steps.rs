//! Each step of a claim's life as one script call: claim, complete,
//! release, renew, forget.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// The helpers shared with the other durable stores.
use crate::store::durable::encode::{millis, new_owner};
use crate::store::durable::wait::LEASE_MARGIN;

use super::batch::{self, ScriptAsk};
use super::call::Reply;
use super::error::{NotReplicated, corrupt};
use super::listener::KeyWatch;
use super::scripts::{SCRIPTS, Script};
use super::{Inner, RECHECK_EVERY};
use crate::key::Key;
use crate::outcome::ConflictReason;
use crate::store::record::RecordState;
use crate::store::record::{Completion, RecordValue};
use crate::{
    store::records::{Forget, Resolution},
    store::{Claim, ClaimAnswer, ClaimRequest, StoreError, StoreResult, Wait},
};

/// How long a waiter naps when the store could not listen as it claimed
/// (the pub/sub connection was down): its claim could not mark the record.
const DEAF_RECHECK: Duration = Duration::from_millis(100);

impl Inner {
    /// Calls `script` on the record at `key` as [`call_alone`] does; a
    /// claim or completion (`digest` given) goes through the store's
    /// coalescer, if it has one, with the others waiting for a round trip.
    ///
    /// [`call_alone`]: Inner::call_alone
    async fn call(
        self: &Arc<Self>,
        script: &'static Script,
        key: &str,
        args: &[&str],
        replicate: bool,
        coalesce: Option<Coalesced>,
    ) -> StoreResult<Reply> {
        let (Some(batches), Some(coalesced)) = (&self.batches, coalesce) else {
            return self.call_alone(script, key, args, replicate).await;
        };
        let ask = ScriptAsk {
            script,
            digest: coalesced.digest,
            record: key.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            replicate,
            owner: coalesced.owner,
        };
        let inner = Arc::clone(self);
        batches
            .ask(ask, move |batch| batch::run(Arc::clone(&inner), batch))
            .await?
            .take()
    }

    /// Calls a script that answers with a number.
    async fn call_for_number(
        &self,
        script: &Script,
        key: &str,
        args: &[&str],
        replicate: bool,
    ) -> StoreResult<(i64, Option<NotReplicated>)> {
        let reply = self.call_alone(script, key, args, replicate).await?;
        number(script, reply)
    }

    pub(super) async fn claim(self: &Arc<Self>, req: ClaimRequest<'_>) -> StoreResult<ClaimAnswer> {
        let owner = new_owner()?;
        let digest = req.key.digest();
        // Subscribed before the claim: a wake-up published after the claim
        // script marked the record is never missed while the listener is up.
        let woken = self.listener.watch(digest);
        let up = self.listener.is_up();
        if !up {
            self.listener.ensure();
        }
        let owner_hex = format!("{owner:032x}");
        let fingerprint = hex::encode(req.fingerprint.as_bytes());
        let lease = millis(req.lease).to_string();
        let retention = millis(req.retention).to_string();
        let args = [
            req.key.as_str(),
            req.tool.as_str(),
            &fingerprint,
            &owner_hex,
            &lease,
            &retention,
            if up { "1" } else { "0" },
        ];
        let record = self.record_key(&digest);
        let coalesced = Coalesced {
            digest,
            owner: Some(owner_hex.clone()),
        };
        let reply = self
            .call(&SCRIPTS.claim, &record, &args, true, Some(coalesced))
            .await?;
        let fields: Vec<Option<String>> = redis::from_redis_value(reply.value)
            .map_err(|e| corrupt("claim", format_args!("{e}")))?;
        let field = |at: usize| fields.get(at).cloned().flatten();
        let verdict = field(0).unwrap_or_default();
        match verdict.as_str() {
            "claimed" => {
                let claim = Claim {
                    key: req.key.clone(),
                    owner,
                    fence: parse(field(1), "claim", "fence")?,
                    taken_over: field(2).as_deref() == Some("1"),
                    retention: req.retention,
                };
                if let Some(short) = reply.short {
                    // Not on enough replicas: give it up, so nothing runs
                    // under a claim a failover could forget.
                    let _ = self.release(&claim).await;
                    return Err(StoreError::Unavailable(Box::new(short)));
                }
                Ok(ClaimAnswer::Claimed(claim))
            }
            "inflight" => {
                let left = Duration::from_millis(parse(field(1), "claim", "lease left")?);
                let nap = (left + LEASE_MARGIN).min(if up { RECHECK_EVERY } else { DEAF_RECHECK });
                Ok(ClaimAnswer::InFlight(wait_on(woken, nap)))
            }
            "completed" => {
                let state = field(1).unwrap_or_default();
                let state = RecordState::parse(&state)
                    .filter(|state| *state != RecordState::Held)
                    .ok_or_else(|| StoreError::Corrupt(format!("a completed state `{state}`")))?;
                let value = field(2).ok_or_else(|| {
                    StoreError::Corrupt(format!("a {state} record without a result"))
                })?;
                let completed_at =
                    UNIX_EPOCH + Duration::from_millis(parse(field(3), "claim", "completed_at")?);
                Ok(ClaimAnswer::Completed(Completion {
                    state,
                    value: RecordValue::from_json(value),
                    completed_at,
                }))
            }
            "conflict_tool" => Ok(ClaimAnswer::Conflict {
                reason: ConflictReason::OtherTool,
                first: None,
            }),
            "conflict_args" => Ok(ClaimAnswer::Conflict {
                reason: ConflictReason::Arguments,
                first: field(1).map(RecordValue::from_json),
            }),
            "collision" => Err(StoreError::Corrupt(format!(
                "key `{}` shares its digest with the stored key `{}`",
                req.key,
                field(1).unwrap_or_default()
            ))),
            other => Err(corrupt("claim", format_args!("`{other}`"))),
        }
    }

    pub(super) async fn complete(
        self: &Arc<Self>,
        claim: &Claim,
        finished: Completion,
    ) -> StoreResult<()> {
        let json = finished.value.to_json()?;
        let digest = claim.key.digest();
        let owner = format!("{:032x}", claim.owner);
        let fence = claim.fence.to_string();
        let completed_at = unix_millis(finished.completed_at).to_string();
        let retention = millis(claim.retention).to_string();
        let digest_hex = hex::encode(digest);
        let args = [
            owner.as_str(),
            &fence,
            finished.state.as_str(),
            &json,
            &completed_at,
            &retention,
            &self.channel,
            &digest_hex,
        ];
        let record = self.record_key(&digest);
        let coalesced = Coalesced {
            digest,
            owner: None,
        };
        let reply = self
            .call(&SCRIPTS.complete, &record, &args, true, Some(coalesced))
            .await?;
        let (done, short) = number(&SCRIPTS.complete, reply)?;
        self.count_wake_up(done);
        if done == 0 {
            return Err(StoreError::LeaseLost);
        }
        match short {
            Some(short) => Err(StoreError::Unavailable(Box::new(short))),
            None => Ok(()),
        }
    }

    pub(super) async fn release(&self, claim: &Claim) -> StoreResult<()> {
        let digest = claim.key.digest();
        let owner = format!("{:032x}", claim.owner);
        let fence = claim.fence.to_string();
        let digest_hex = hex::encode(digest);
        let args = [owner.as_str(), &fence, &self.channel, &digest_hex];
        let record = self.record_key(&digest);
        let (released, _) = self
            .call_for_number(&SCRIPTS.release, &record, &args, false)
            .await?;
        self.count_wake_up(released);
        if released == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    /// Releases the claim of `owner` (hex) at `fence` on the record at
    /// `record`, if it is still held so: a claim made for a caller that
    /// was gone.
    pub(super) async fn release_held(
        &self,
        record: &str,
        owner: &str,
        fence: &str,
        digest: &[u8; 32],
    ) -> StoreResult<()> {
        let digest_hex = hex::encode(digest);
        let args = [owner, fence, &self.channel, &digest_hex];
        let (released, _) = self
            .call_for_number(&SCRIPTS.release, record, &args, false)
            .await?;
        self.count_wake_up(released);
        Ok(())
    }

    pub(super) async fn renew(&self, claim: &Claim, lease: Duration) -> StoreResult<()> {
        let owner = format!("{:032x}", claim.owner);
        let fence = claim.fence.to_string();
        let lease = millis(lease).to_string();
        let retention = millis(claim.retention).to_string();
        let args = [owner.as_str(), &fence, &lease, &retention];
        let record = self.record_key(&claim.key.digest());
        let (renewed, _) = self
            .call_for_number(&SCRIPTS.renew, &record, &args, false)
            .await?;
        if renewed == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    pub(super) async fn forget(&self, key: &Key, how: Forget) -> StoreResult<bool> {
        let digest = key.digest();
        let digest_hex = hex::encode(digest);
        let force = if how == Forget::Force { "1" } else { "0" };
        let args = [force, &self.channel, &digest_hex];
        let record = self.record_key(&digest);
        let (forgotten, _) = self
            .call_for_number(&SCRIPTS.forget, &record, &args, false)
            .await?;
        match forgotten {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(StoreError::LiveClaim {
                key: key.as_str().to_owned(),
            }),
        }
    }

    pub(super) async fn resolve(&self, key: &Key, how: Resolution) -> StoreResult<()> {
        // Refused before any I/O, as a completion's result is.
        let (applied, result) = match &how {
            Resolution::Applied(value) => ("1", value.to_json()?.into_owned()),
            Resolution::NotApplied => ("0", String::new()),
        };
        let digest = key.digest();
        let digest_hex = hex::encode(digest);
        let completed_at = unix_millis(SystemTime::now()).to_string();
        let args = [applied, &result, &completed_at, &self.channel, &digest_hex];
        let record = self.record_key(&digest);
        let (resolved, _) = self
            .call_for_number(&SCRIPTS.resolve, &record, &args, false)
            .await?;
        let key_text = || key.as_str().to_owned();
        match resolved {
            1 => Ok(()),
            0 => Err(StoreError::NoRecord { key: key_text() }),
            -1 => Err(StoreError::LiveClaim { key: key_text() }),
            2 => Err(StoreError::NotUnknown {
                key: key_text(),
                state: RecordState::Done,
            }),
            3 => Err(StoreError::NotUnknown {
                key: key_text(),
                state: RecordState::Failed,
            }),
            other => Err(corrupt(SCRIPTS.resolve.name, format_args!("{other}"))),
        }
    }

    /// Counts a completion or release that published a wake-up (the
    /// scripts answer 2).
    fn count_wake_up(&self, answer: i64) {
        if answer == 2 {
            self.published.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a coalesced call carries beside its script: the record's digest,
/// and a claim's holder token in hex.
struct Coalesced {
    digest: [u8; 32],
    owner: Option<String>,
}

/// A script's answer as a number.
fn number(script: &Script, reply: Reply) -> StoreResult<(i64, Option<NotReplicated>)> {
    let number = redis::from_redis_value(reply.value)
        .map_err(|e| corrupt(script.name, format_args!("{e}")))?;
    Ok((number, reply.short))
}

/// Waits for the key's wake-up or `nap`, whichever comes first; the guard
/// then claims again.
fn wait_on(woken: KeyWatch, nap: Duration) -> Wait {
    Wait::new(woken.until(nap))
}

/// A number a script wrote as text.
pub(super) fn parse(text: Option<String>, step: &'static str, what: &str) -> StoreResult<u64> {
    text.as_deref()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| corrupt(step, format_args!("a {what} of {text:?}")))
}

/// Milliseconds since the Unix epoch, zero before it.
fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map_or(0, millis)
}
