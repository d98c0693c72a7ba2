//! The claim: everything a call does before its action, with no type of
//! the tool's in it, so it is compiled once for every tool.

use std::borrow::Cow;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::{answers_at_once, memory};
use crate::error::Error;
use crate::key::{Key, PendingKey};
use crate::observe;
use crate::outcome::{
    ConflictReason, DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE, OTHER_TOOL_NOTE, Outcome,
};
use crate::policy::Takeover;
use crate::store::record::RecordState;
use crate::store::record::{Completion, RecordValue};
use crate::store::{
    ClaimAnswer, ClaimRequest, Store, StoreError, StoreFuture, StoreResult, default_store,
};
use crate::tool::ToolId;

use super::acting::Acting;
use super::active;
use super::backoff::Backoff;
use super::call::Call;
use super::codec::ErrorCodec;
use super::held::{Held, detached};
use super::verify::{Checked, Verification, unknown_detail};

impl Call {
    /// Claims the key: everything before the action, with no type of the
    /// tool's in it, so it is compiled once for every tool. A store that
    /// answers at once is answered here, with no future at all; a store
    /// that does I/O, or a duplicate that must wait, gets one boxed future.
    ///
    /// A repeat of a finished call that the store answers at once is lent
    /// to `replay`, which reads the tool's result out of the record where
    /// it lies; the call then ends as [`Ended::ReplayedAtOnce`].
    ///
    /// The call is worked on in place, so that a replay never moves it.
    /// What is left of it once it has begun is only to be dropped; if
    /// `replay` panics, it is left as it was.
    pub(super) fn begin(&mut self, replay: &mut dyn FnMut(&Completion)) -> Begin {
        if active::is_acting(self.key.as_str()) {
            return Begin::Now(Begun::Ended(Ended::Failed(Error::Reentrant {
                key: mem::take(&mut self.key).into_key(),
            })));
        }
        // Borrowed, not cloned: a replay from memory touches no reference
        // count. Only the paths that outlive this call take a handle. The
        // call is left whole until it ends, so that a panic in `replay`
        // leaves it as it was.
        let default;
        let store = match &self.store {
            Some(store) => store,
            None => {
                default = default_store();
                &default
            }
        };
        let Some(memory) = memory(store) else {
            let store = Arc::clone(store);
            return Begin::Later(Box::pin(self.take().claiming(store, None)));
        };
        // A repeat of a finished call is found by the key's text, so its
        // key is never made a shared value; any other call claims the key.
        enum Probed {
            Replayed(RecordState),
            Claimed(Key, Answer),
        }
        let (lease, retention) = (self.policy.get().lease, self.policy.get().retention);
        let probed = observe::timed_now(&**store, "claim", || {
            let mut lent = None;
            memory.replay_at_once(
                self.key.as_str(),
                &self.tool,
                self.fingerprint,
                &mut |completion| {
                    if lent.is_none() {
                        lent = Some(completion.state);
                        replay(completion);
                    }
                },
            );
            if let Some(state) = lent {
                return Probed::Replayed(state);
            }
            let key = self.key.share().clone();
            let request = ClaimRequest {
                key: &key,
                tool: &self.tool,
                fingerprint: self.fingerprint,
                lease,
                retention,
            };
            // Asked of the memory store itself: its answer is ready, and
            // no future is made around it.
            let answer = memory
                .claim_at_once(&request)
                .map_claim(|claim| Held::new(store, claim, lease));
            Probed::Claimed(key, answer)
        });
        let (key, answer) = match probed {
            Probed::Replayed(state) => {
                observe::found_completed(&self.tool, state);
                let (key, note) = self.replay_parts();
                return Begin::Now(Begun::Ended(Ended::ReplayedAtOnce { key, note }));
            }
            Probed::Claimed(key, answer) => (key, answer),
        };
        match answer {
            ClaimAnswer::Claimed(held) if self.acts_on(&held) => {
                observe::claimed(&self.tool, held.fence(), held.taken_over());
                let tool = mem::replace(&mut self.tool, ToolId::new(""));
                let verification = self.verification();
                Begin::Now(Begun::Act(Acting::new(key, tool, held, verification)))
            }
            answer @ (ClaimAnswer::Claimed(_) | ClaimAnswer::InFlight(_)) => {
                let store = Arc::clone(store);
                Begin::Later(Box::pin(self.take().claiming(store, Some(answer))))
            }
            ClaimAnswer::Completed(finished) => Begin::Now(self.replay(finished)),
            ClaimAnswer::Conflict { reason, first } => Begin::Now(self.conflict(reason, first)),
        }
    }

    fn request<'a>(&'a self, key: &'a Key) -> ClaimRequest<'a> {
        ClaimRequest {
            key,
            tool: &self.tool,
            fingerprint: self.fingerprint,
            lease: self.policy.get().lease,
            retention: self.policy.get().retention,
        }
    }

    /// Whether a claim just won acts at once: it is fresh, or it took over
    /// from a holder that stopped and the policy is to run again.
    fn acts_on(&self, held: &Held) -> bool {
        !held.taken_over() || self.policy.get().takeover == Takeover::Rerun
    }

    /// The call's verification, with what bounds it, taken out.
    fn verification(&mut self) -> Option<Box<Verification>> {
        let policy = self.policy.get();
        let (settle, wait) = (policy.settle, policy.wait);
        self.verifier.take().map(|verifier| {
            Box::new(Verification {
                verifier,
                settle,
                wait,
            })
        })
    }

    /// The claim loop for stores that do I/O, and for duplicates that wait
    /// for a call in flight. `first` is an answer already in hand.
    async fn claiming(mut self, store: Arc<dyn Store>, mut first: Option<Answer>) -> Begun {
        let key = self.key.share().clone();
        let mut deadline = None;
        let mut backoff = Backoff::new();
        loop {
            let answer = match first.take() {
                Some(answer) => answer,
                None => {
                    match observe::timed(&*store, "claim", claim(&store, self.request(&key))).await
                    {
                        Ok(answer) => answer,
                        // Nothing changed: go again while the call may wait.
                        Err(StoreError::Contended(_))
                            if backoff
                                .again(
                                    *deadline.get_or_insert_with(|| {
                                        Instant::now() + self.policy.get().wait
                                    }),
                                )
                                .await =>
                        {
                            continue;
                        }
                        Err(cause) => {
                            let cause = observe::store_failed(&self.tool, &*store, "claim", cause);
                            return Begun::Ended(Ended::Failed(cause));
                        }
                    }
                }
            };
            match answer {
                ClaimAnswer::Claimed(mut held) if !self.acts_on(&held) => {
                    // Taken over from a holder that stopped mid-action, which
                    // may or may not have acted: ask the provider if the call
                    // can, or record that nobody knows.
                    observe::claimed(&self.tool, held.fence(), true);
                    let verification = self.verification();
                    let checked = match &verification {
                        Some(v) => {
                            // Dropped while it asks, the call leaves the
                            // question to a task of its own.
                            let (tool, v_) = (self.tool.clone(), Verification::clone(v));
                            held.verify_if_abandoned(key.clone(), tool, v_);
                            v.ask(key.clone()).await
                        }
                        None => Checked::Unknown("its holder stopped mid-action".to_owned()),
                    };
                    let (state, value) = match checked {
                        Checked::NotApplied => {
                            return Begun::Act(Acting::new(key, self.tool, held, verification));
                        }
                        Checked::Applied(value) => (RecordState::Done, value),
                        Checked::Unknown(why) => (RecordState::Unknown, unknown_detail(&why, None)),
                    };
                    let finished = Completion {
                        state,
                        value,
                        completed_at: SystemTime::now(),
                    };
                    // Nothing ran here: if the outcome cannot be recorded,
                    // the claim stays held and the next caller decides again.
                    let recorded =
                        observe::timed(&*store, "complete", held.complete(finished.clone()));
                    if let Err(cause) = recorded.await {
                        let cause = observe::store_failed(&self.tool, &*store, "complete", cause);
                        return Begun::Ended(Ended::Failed(cause));
                    }
                    if state == RecordState::Done {
                        return self.replay(finished);
                    }
                    observe::unknown_outcome(&self.tool, true);
                    return Begun::Ended(Ended::Failed(Error::UnknownOutcome { key }));
                }
                ClaimAnswer::Claimed(held) => {
                    observe::claimed(&self.tool, held.fence(), held.taken_over());
                    let verification = self.verification();
                    return Begun::Act(Acting::new(key, self.tool, held, verification));
                }
                ClaimAnswer::InFlight(woken) => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + self.policy.get().wait);
                    let since = observe::waiting(&self.tool, deadline, self.policy.get().wait);
                    if tokio::time::timeout_at(deadline, woken).await.is_err() {
                        observe::wait_deadline_passed(&self.tool, since);
                        return Begun::Ended(Ended::Failed(Error::InProgress { key }));
                    }
                    observe::woken(&self.tool, since);
                }
                ClaimAnswer::Completed(finished) => return self.replay(finished),
                ClaimAnswer::Conflict { reason, first } => return self.conflict(reason, first),
            }
        }
    }

    /// A replay, with the note the call site chose.
    fn replay(&mut self, finished: Completion) -> Begun {
        observe::found_completed(&self.tool, finished.state);
        let (key, note) = self.replay_parts();
        Begun::Ended(Ended::Replay {
            finished,
            note,
            key,
        })
    }

    /// The key, and the note the call site chose for a replay, taken out.
    fn replay_parts(&mut self) -> (PendingKey, Cow<'static, str>) {
        let note = self
            .policy
            .take_replay_note()
            .unwrap_or(Cow::Borrowed(DEFAULT_REPLAY_NOTE));
        (mem::take(&mut self.key), note)
    }

    /// Takes the call out, leaving an empty one that is only dropped.
    fn take(&mut self) -> Call {
        mem::replace(self, Call::pending(ToolId::new(""), PendingKey::default()))
    }

    /// A conflict, with the note the call site chose (or the other tool's).
    fn conflict(&mut self, reason: ConflictReason, first: Option<RecordValue>) -> Begun {
        observe::conflict(&self.tool, reason);
        Begun::Ended(Ended::Conflict {
            note: match reason {
                ConflictReason::OtherTool => Cow::Borrowed(OTHER_TOOL_NOTE),
                _ => self
                    .policy
                    .take_conflict_note()
                    .unwrap_or(Cow::Borrowed(DEFAULT_CONFLICT_NOTE)),
            },
            reason,
            first,
        })
    }
}

/// How a call's claim went: known at once, or after a wait or I/O.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per call and taken apart at once; boxing `Now` would allocate on every call"
)]
pub(super) enum Begin {
    Now(Begun),
    Later(Pin<Box<dyn Future<Output = Begun> + Send>>),
}

/// A claim's end: act, or answer without acting.
pub(super) enum Begun {
    Act(Acting),
    Ended(Ended),
}

/// A call that ended without acting.
pub(super) enum Ended {
    Replay {
        key: PendingKey,
        finished: Completion,
        note: Cow<'static, str>,
    },
    /// A replay the store answered at once, whose result the caller's
    /// `replay` already read out of the record.
    ReplayedAtOnce {
        key: PendingKey,
        note: Cow<'static, str>,
    },
    Conflict {
        reason: ConflictReason,
        first: Option<RecordValue>,
        note: Cow<'static, str>,
    },
    Failed(Error),
}

/// A finished action's record, read as the tool's types.
pub(super) enum Replayed<T, E> {
    Value(T),
    Error(E),
    Unknown,
    Unreadable(Error),
}

impl<T, E> Replayed<T, E>
where
    T: DeserializeOwned + Clone + 'static,
    E: From<Error>,
{
    /// Reads the record: its value as `T`, or its recorded error as `E` if
    /// this call site records errors.
    pub(super) fn read(finished: &Completion, errors: Option<&ErrorCodec<E>>) -> Replayed<T, E> {
        match finished.state {
            RecordState::Done => match finished.value.decode::<T>() {
                Ok(value) => Replayed::Value(value),
                Err(error) => Replayed::Unreadable(Error::Codec(error)),
            },
            RecordState::Failed => match errors {
                Some(codec) => match (codec.replay)(&finished.value) {
                    Ok(error) => Replayed::Error(error),
                    Err(error) => Replayed::Unreadable(error),
                },
                // Another call site of this tool records errors; this one
                // cannot read them, and must not act again.
                None => Replayed::Unknown,
            },
            // A completion is never held; were it, acting again could
            // act twice.
            RecordState::Unknown | RecordState::Held => Replayed::Unknown,
        }
    }

    /// The tool's result: the replayed value with its note, or the
    /// recorded error.
    pub(super) fn into_result(
        self,
        key: PendingKey,
        note: Cow<'static, str>,
    ) -> Result<Outcome<T>, E> {
        match self {
            Replayed::Value(value) => Ok(Outcome::Replay { value, note }),
            Replayed::Error(error) => Err(error),
            Replayed::Unknown => Err(Error::UnknownOutcome {
                key: key.into_key(),
            }
            .into()),
            Replayed::Unreadable(error) => Err(error.into()),
        }
    }
}

impl Ended {
    /// The call's result. `replayed` is what the caller's `replay` read, for
    /// [`Ended::ReplayedAtOnce`].
    pub(super) fn into_result<T, E>(
        self,
        errors: Option<&ErrorCodec<E>>,
        replayed: Option<Replayed<T, E>>,
    ) -> Result<Outcome<T>, E>
    where
        T: DeserializeOwned + Clone + 'static,
        E: From<Error>,
    {
        match self {
            Ended::Replay {
                key,
                finished,
                note,
            } => Replayed::read(&finished, errors).into_result(key, note),
            // The store lent the record to `replay` before the call ended
            // so; without a reading, nothing says what the first call did.
            Ended::ReplayedAtOnce { key, note } => {
                replayed.unwrap_or(Replayed::Unknown).into_result(key, note)
            }
            Ended::Conflict {
                reason,
                first,
                note,
            } => Ok(Outcome::Conflict {
                first: match first {
                    Some(first) => Some(first.decode::<T>().map_err(Error::Codec)?),
                    None => None,
                },
                reason,
                note,
            }),
            Ended::Failed(error) => Err(error.into()),
        }
    }
}

/// What a claim found, with a held claim already in the guard's hands.
type Answer = ClaimAnswer<Held>;

/// Claims a key. For stores that do I/O the claim runs on a task of its own:
/// if this future is dropped while the claim is on the wire, the task still
/// gets the answer, and a claim nobody will use is released at once.
///
/// Ready at once for stores that answer at once, so the guard's own future
/// carries no state for the other path.
fn claim<'a>(
    store: &'a Arc<dyn Store>,
    request: ClaimRequest<'a>,
) -> StoreFuture<'a, StoreResult<Answer>> {
    let lease = request.lease;
    if answers_at_once(store) {
        return match store.claim(request).into_ready() {
            Ok(state) => StoreFuture::ready(state.map(|state| held(state, store, lease))),
            Err(pending) => {
                StoreFuture::boxed(async move { Ok(held(pending.await?, store, lease)) })
            }
        };
    }
    let (key, tool) = (request.key.clone(), request.tool.clone());
    let store = Arc::clone(store);
    StoreFuture::boxed(detached(async move {
        let request = ClaimRequest {
            key: &key,
            tool: &tool,
            ..request
        };
        let state = store.claim(request).await?;
        Ok(held(state, &store, lease))
    }))
}

/// The store's answer, its claim held by the guard.
fn held(answer: ClaimAnswer, store: &Arc<dyn Store>, lease: Duration) -> Answer {
    answer.map_claim(|claim| Held::new(store, claim, lease))
}
