//! Claims and completions coalesced: the scripts that arrive while others
//! are on the wire go together, each its own `EVALSHA`, in one pipeline
//! (with one `WAIT` after them when the store asks for replicated writes);
//! one that arrives alone goes at once, as it would uncoalesced.
//!
//! Each member of a pipeline gets its own reply: the pipeline ignores
//! errors, so a script that fails for one member (an error the server
//! raises for its key) fails only that member. A member whose script the
//! server forgot (`NOSCRIPT`) or whose server was loading or failing over,
//! and every member of a pipeline whose connection broke, goes again alone,
//! by the path that loads scripts and reconnects; those of one pipeline go
//! at once, so a server that stays away costs them one reconnection budget
//! together. A claim made for a caller that is gone is released at once.
//!
//! On a Redis Cluster the steps are not coalesced: the keys of one pipeline
//! would span several slots and nodes, so each step goes alone, routed to
//! its key's primary.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::{ErrorKind, ServerErrorKind, Value};

use super::Inner;
use super::call::{self, Reply, is_broken_connection};
use super::error::{NotReplicated, corrupt, redis_error};
use super::scripts::Script;
use crate::store::StoreResult;
use crate::store::durable::coalesce::{Ask, Member};
use crate::store::durable::encode::millis;

/// One script call as a pipeline carries it: owned, since the pipeline
/// outlives the call.
pub(super) struct ScriptAsk {
    pub(super) script: &'static Script,
    pub(super) digest: [u8; 32],
    pub(super) record: String,
    pub(super) args: Vec<String>,
    pub(super) replicate: bool,
    /// For a claim, its holder token in hex: a claim this call makes for a
    /// caller that is gone is released by it.
    pub(super) owner: Option<String>,
}

impl Ask for ScriptAsk {
    type Key = [u8; 32];
    fn key(&self) -> [u8; 32] {
        self.digest
    }
}

/// A member's reply, and the claim it holds until its caller takes it.
pub(super) struct Answered {
    reply: Option<StoreResult<Reply>>,
    undo: Option<Undo>,
}

impl Answered {
    fn new(ask: &ScriptAsk, inner: &Arc<Inner>, reply: StoreResult<Reply>) -> Answered {
        let undo = match (&ask.owner, &reply) {
            (Some(owner), Ok(reply)) => held_fence(&reply.value).map(|fence| Undo {
                runtime: tokio::runtime::Handle::try_current().ok(),
                inner: Arc::clone(inner),
                record: ask.record.clone(),
                owner: owner.clone(),
                fence,
                digest: ask.digest,
            }),
            _ => None,
        };
        Answered {
            reply: Some(reply),
            undo,
        }
    }

    /// The reply, now the caller's: a claim in it is the caller's to keep.
    pub(super) fn take(mut self) -> StoreResult<Reply> {
        self.undo = None;
        self.reply
            .take()
            .unwrap_or_else(|| Err(corrupt("batch", "an answer taken twice")))
    }
}

/// A claim made for a caller, released if the caller never takes it.
struct Undo {
    /// The runtime the batch ran on: the release goes there, wherever the
    /// answer is dropped.
    runtime: Option<tokio::runtime::Handle>,
    inner: Arc<Inner>,
    record: String,
    owner: String,
    fence: String,
    digest: [u8; 32],
}

impl Drop for Answered {
    fn drop(&mut self) {
        let Some(undo) = self.undo.take() else {
            return;
        };
        if let Some(runtime) = undo.runtime.clone() {
            // Fenced: it deletes only this owner's claim at this fence.
            drop(runtime.spawn(async move {
                let _ = undo
                    .inner
                    .release_held(&undo.record, &undo.owner, &undo.fence, &undo.digest)
                    .await;
            }));
        }
    }
}

/// The fence of a claim script's reply that says `claimed`.
fn held_fence(value: &Value) -> Option<String> {
    let fields: Vec<Option<String>> = redis::from_redis_value_ref(value).ok()?;
    match fields.as_slice() {
        [Some(verdict), Some(fence), ..] if verdict == "claimed" => Some(fence.clone()),
        _ => None,
    }
}

/// Runs one batch of script calls and answers each member.
pub(super) async fn run(inner: Arc<Inner>, mut batch: Vec<Member<ScriptAsk, Answered>>) {
    if batch.len() == 1 {
        if let Some(member) = batch.pop() {
            let reply = alone(&inner, &member.ask).await;
            let answered = Answered::new(&member.ask, &inner, reply);
            member.answer(answered);
        }
        return;
    }
    let wait = inner
        .replicas
        .filter(|_| batch.iter().any(|m| m.ask.replicate));
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for member in &batch {
        let ask = &member.ask;
        pipe.cmd("EVALSHA")
            .arg(&ask.script.hash)
            .arg(1)
            .arg(&ask.record)
            .arg(&ask.args);
    }
    if let Some((replicas, timeout)) = wait {
        pipe.cmd("WAIT").arg(replicas).arg(millis(timeout));
    }
    let mut connection = inner.connection();
    inner.round_trips.fetch_add(1, Ordering::Relaxed);
    let sent: redis::RedisResult<Vec<Value>> = pipe.query_async(&mut connection).await;
    let values = match sent {
        Ok(values) if values.len() == batch.len() + usize::from(wait.is_some()) => values,
        // The connection broke, or the replies do not match the asks:
        // each goes again alone, reconnecting as it does.
        _ => return each_alone(&inner, batch).await,
    };
    let mut values = values.into_iter();
    let acked = wait.map(|w| (w, values.next_back()));
    let mut again = Vec::new();
    for (member, value) in batch.into_iter().zip(values) {
        let ask = &member.ask;
        let reply = match value.extract_error() {
            Ok(value) => short(ask, acked.as_ref()).map(|short| Reply { value, short }),
            // A script the server forgot, or a server loading or failing
            // over: this one goes again alone, as an uncoalesced step would.
            Err(err)
                if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
                    || is_broken_connection(&err) =>
            {
                again.push(member);
                continue;
            }
            Err(err) => Err(redis_error(ask.script.name)(err)),
        };
        let answered = Answered::new(ask, &inner, reply);
        member.answer(answered);
    }
    each_alone(&inner, again).await;
}

/// Sends each member again alone, all at once: a server that stays away
/// costs the batch one reconnection budget, not one per member. A member
/// whose caller is gone goes too, so that a claim the pipeline made for it
/// is found and released.
async fn each_alone(inner: &Arc<Inner>, members: Vec<Member<ScriptAsk, Answered>>) {
    futures_util::future::join_all(members.into_iter().map(|member| async move {
        let reply = alone(inner, &member.ask).await;
        let answered = Answered::new(&member.ask, inner, reply);
        member.answer(answered);
    }))
    .await;
}

/// One member's call by the uncoalesced path.
async fn alone(inner: &Arc<Inner>, ask: &ScriptAsk) -> StoreResult<Reply> {
    let args: Vec<&str> = ask.args.iter().map(String::as_str).collect();
    inner
        .call_alone(ask.script, &ask.record, &args, ask.replicate)
        .await
}

/// Whether the pipeline's `WAIT` fell short for a member that asked for it.
fn short(
    ask: &ScriptAsk,
    acked: Option<&((u32, std::time::Duration), Option<Value>)>,
) -> StoreResult<Option<NotReplicated>> {
    let Some((asked, value)) = acked.filter(|_| ask.replicate) else {
        return Ok(None);
    };
    let name = ask.script.name;
    let value = value
        .as_ref()
        .ok_or_else(|| corrupt(name, "no `WAIT` reply"))?;
    call::short(name, *asked, value)
}
