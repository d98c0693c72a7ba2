//! The claim-first guard: how one guarded call runs.

use std::borrow::Cow;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::observe;
use crate::outcome::ConflictReason;
use crate::outcome::{DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE, OTHER_TOOL_NOTE, Outcome};
use crate::policy::{Policy, Takeover};
use crate::record::{Ending, Finished, Recorded, ToolId};
use crate::store::{IntoStore, Store, StoreError, default_store};

use held::{Answer, Asked, Held};

mod active;
mod held;

pub use active::current_key;

/// One guarded call: a key, the tool, the arguments' fingerprint and the
/// call site's policy. [`Call::run`] claims the key, then acts or replays.
///
/// This is what `#[idempotent]` expands into; use it by hand when keys are
/// built at run time:
///
/// ```
/// use std::sync::Arc;
/// use idempotent_tools::{Call, Fingerprint, Key, MemoryStore, Outcome, Run};
///
/// #[derive(Debug, thiserror::Error)]
/// enum PayError {
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_tools::Error),
/// }
///
/// async fn refund(run: &Run, order_id: &str, usd: u64) -> Result<Outcome<String>, PayError> {
///     let key = Key::builder()
///         .part("run", run)?
///         .literal(":refund:")?
///         .part("order_id", order_id)?
///         .finish()?;
///     let fingerprint = Fingerprint::builder().arg("usd", &usd)?.finish();
///     Call::new("shop::refund", key)
///         .fingerprint(fingerprint)
///         .run(async move { Ok(format!("refunded {usd} on {order_id}")) })
///         .await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), PayError> {
/// let run = Run::new("run-1")?;
/// assert!(refund(&run, "1182", 42).await?.is_fresh());
/// assert!(refund(&run, "1182", 42).await?.is_replay());
/// assert!(refund(&run, "1182", 41).await?.is_conflict());
/// # Ok(()) }
/// ```
#[must_use = "a call does nothing until `.run(..)` is awaited"]
pub struct Call {
    key: Key,
    tool: ToolId,
    fingerprint: Fingerprint,
    policy: Policy,
    store: Option<Arc<dyn Store>>,
}

impl Call {
    /// A call of `tool` under `key`, with the default policy and store.
    pub fn new(tool: impl Into<ToolId>, key: Key) -> Call {
        Call {
            key,
            tool: tool.into(),
            fingerprint: Fingerprint::EMPTY,
            policy: Policy::default(),
            store: None,
        }
    }

    /// The arguments beyond the key. A different fingerprint under the same
    /// key is a conflict.
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Call {
        self.fingerprint = fingerprint;
        self
    }

    /// Uses this store instead of the process default.
    pub fn store(mut self, store: impl IntoStore) -> Call {
        self.store = Some(store.into_store());
        self
    }

    /// Replaces the whole policy: one [`Policy`] value shared by several
    /// tools, say. Setters called after it change only their own field.
    ///
    /// ```
    /// use std::time::Duration;
    /// use std::sync::Arc;
    /// use idempotent_tools::{Call, Key, MemoryStore, Policy, Run};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idempotent_tools::Error> {
    /// let shop = Policy {
    ///     replay_note: Some("Already refunded: tell the customer it is done.".into()),
    ///     retention: Duration::from_secs(7 * 24 * 3600),
    ///     ..Policy::default()
    /// };
    /// let store = Arc::new(MemoryStore::new());
    /// let run = Run::new("run-1")?;
    /// let refund = || -> Result<Call, idempotent_tools::Error> {
    ///     let key = Key::builder()
    ///         .part("run", &run)?
    ///         .literal(":refund:")?
    ///         .part("order_id", "A1")?
    ///         .finish()?;
    ///     Ok(Call::new("shop::refund", key).policy(shop.clone()).store(store.clone()))
    /// };
    /// refund()?.run(async { Ok::<_, idempotent_tools::Error>(42) }).await?;
    /// let again = refund()?.run(async { Ok::<_, idempotent_tools::Error>(42) }).await?;
    /// assert_eq!(again.note(), Some("Already refunded: tell the customer it is done."));
    /// # Ok(())
    /// # }
    /// ```
    pub fn policy(mut self, policy: Policy) -> Call {
        self.policy = policy;
        self
    }

    /// How long the record is kept once finished.
    pub fn retention(mut self, retention: Duration) -> Call {
        self.policy.retention = retention;
        self
    }

    /// How long a duplicate waits for an in-flight call.
    pub fn wait(mut self, wait: Duration) -> Call {
        self.policy.wait = wait;
        self
    }

    /// The claim's lease.
    pub fn lease(mut self, lease: Duration) -> Call {
        self.policy.lease = lease;
        self
    }

    /// What a takeover from a crashed holder does.
    pub fn takeover(mut self, takeover: Takeover) -> Call {
        self.policy.takeover = takeover;
        self
    }

    /// The note a replay carries for the model.
    pub fn replay_note(mut self, note: impl Into<Cow<'static, str>>) -> Call {
        self.policy.replay_note = Some(note.into());
        self
    }

    /// The note a conflict on arguments carries for the model.
    pub fn conflict_note(mut self, note: impl Into<Cow<'static, str>>) -> Call {
        self.policy.conflict_note = Some(note.into());
        self
    }

    /// The key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Claims the key, then runs `action` or replays.
    ///
    /// - First call: runs `action`. On `Ok` the result is recorded and
    ///   returned as [`Outcome::Fresh`]. On `Err` the claim is released and
    ///   nothing is recorded, so a retry runs the action again.
    /// - A duplicate after completion gets [`Outcome::Replay`].
    /// - A duplicate while the first is in flight waits (by wake-up) and gets
    ///   its result; if the first fails, one waiter takes over and runs.
    /// - The same key with other arguments or from another tool gets
    ///   [`Outcome::Conflict`].
    ///
    /// # Errors
    ///
    /// The action's own `Err`, or an [`Error`] converted into `E`. Each says
    /// whether the action ran ([`Error::action_ran`]):
    /// - before acting: [`Error::Store`] (the claim could not be made),
    ///   [`Error::InProgress`] (a duplicate still in flight at the `wait`
    ///   deadline), [`Error::Reentrant`], [`Error::UnknownOutcome`], and
    ///   [`Error::Codec`] for a recorded result of another type;
    /// - after acting: [`Error::NotRecorded`], when the result could not be
    ///   recorded (the completion is tried again while the lease holds), and
    ///   [`Error::LeaseLost`], when another caller took the claim over.
    ///
    /// # Cancel safety
    ///
    /// The returned future may be dropped at any `.await`, as frameworks do
    /// with timeouts and `select!`:
    /// - before the action starts, the claim is released (or never made):
    ///   the next call acts at once, without waiting out a lease;
    /// - while the action runs, the action is dropped with it and the claim is
    ///   released, as after an error, so a retry acts again;
    /// - once the action has returned `Ok`, its result is still recorded on a
    ///   task of its own, and every later call replays it.
    ///
    /// If `action` panics, the claim is released and the panic propagates.
    pub fn run<T, E, F>(self, action: F) -> impl Future<Output = Result<Outcome<T>, E>>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error>,
    {
        drive(Ok(self), action, None)
    }

    /// Like [`Call::run`], but an `Err` is final: it is recorded, and every
    /// duplicate gets the same error back without running the action. For
    /// actions whose failure must not be retried, such as a declined card.
    pub fn run_recording_errors<T, E, F>(
        self,
        action: F,
    ) -> impl Future<Output = Result<Outcome<T>, E>>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        drive(Ok(self), action, Some(ErrorCodec::<E>::recording()))
    }

    /// Claims the key: everything before the action, with no type of the
    /// tool's in it, so it is compiled once for every tool. A store that
    /// answers at once is answered here, with no future at all; a store
    /// that does I/O, or a duplicate that must wait, gets one boxed future.
    fn begin(self) -> Begin {
        if active::is_acting(&self.key) {
            return Begin::Now(Begun::Ended(Ended::Failed(Error::Reentrant {
                key: self.key,
            })));
        }
        let store = match &self.store {
            Some(store) => Arc::clone(store),
            None => default_store(),
        };
        if !store.answers_at_once() {
            return Begin::Later(Box::pin(self.claiming(store, None)));
        }
        let ready = observe::timed_now(&*store, "claim", || {
            held::claim(&store, self.asked()).into_ready().ok()
        });
        // A store that said it answers at once, and did not, is asked again
        // the long way.
        let Some(answer) = ready else {
            return Begin::Later(Box::pin(self.claiming(store, None)));
        };
        match answer {
            Ok(Answer::Claimed(held)) if !self.reports_takeover(&held) => {
                observe::claimed(&self.tool, held.fence(), held.taken_over());
                Begin::Now(Begun::Act(Acting::new(self.key, self.tool, held)))
            }
            Ok(Answer::Claimed(held)) => {
                Begin::Later(Box::pin(self.claiming(store, Some(Answer::Claimed(held)))))
            }
            Ok(Answer::InFlight(wait)) => {
                Begin::Later(Box::pin(self.claiming(store, Some(Answer::InFlight(wait)))))
            }
            Ok(Answer::Completed(finished)) => Begin::Now(self.replay(finished)),
            Ok(Answer::Conflict { reason, first }) => Begin::Now(self.conflict(reason, first)),
            Err(cause) => {
                let cause = observe::store_failed(&self.tool, &*store, "claim", cause);
                Begin::Now(Begun::Ended(Ended::Failed(cause)))
            }
        }
    }

    fn asked(&self) -> Asked<'_> {
        Asked {
            key: &self.key,
            tool: &self.tool,
            fingerprint: self.fingerprint,
            lease: self.policy.lease,
            retention: self.policy.retention,
        }
    }

    fn reports_takeover(&self, held: &Held) -> bool {
        held.taken_over() && self.policy.takeover == Takeover::ReportUnknown
    }

    /// The claim loop for stores that do I/O, and for duplicates that wait
    /// for a call in flight. `first` is an answer already in hand.
    async fn claiming(self, store: Arc<dyn Store>, mut first: Option<Answer>) -> Begun {
        let mut deadline = None;
        loop {
            let answer = match first.take() {
                Some(answer) => answer,
                None => match observe::timed(&*store, "claim", held::claim(&store, self.asked()))
                    .await
                {
                    Ok(answer) => answer,
                    Err(cause) => {
                        let cause = observe::store_failed(&self.tool, &*store, "claim", cause);
                        return Begun::Ended(Ended::Failed(cause));
                    }
                },
            };
            match answer {
                Answer::Claimed(held) if self.reports_takeover(&held) => {
                    let unknown = Finished {
                        ending: Ending::Unknown,
                        value: Recorded::from_json("null"),
                        finished_at: SystemTime::now(),
                    };
                    // Nothing ran here: if the unknown outcome cannot be
                    // recorded, the claim stays held and the next caller
                    // decides again.
                    observe::claimed(&self.tool, held.fence(), true);
                    let recorded = observe::timed(&*store, "complete", held.complete(unknown));
                    if let Err(cause) = recorded.await {
                        let cause = observe::store_failed(&self.tool, &*store, "complete", cause);
                        return Begun::Ended(Ended::Failed(cause));
                    }
                    observe::unknown_outcome(&self.tool, true);
                    return Begun::Ended(Ended::Failed(Error::UnknownOutcome { key: self.key }));
                }
                Answer::Claimed(held) => {
                    observe::claimed(&self.tool, held.fence(), held.taken_over());
                    return Begun::Act(Acting::new(self.key, self.tool, held));
                }
                Answer::InFlight(woken) => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + self.policy.wait);
                    let since = observe::waiting(&self.tool, deadline, self.policy.wait);
                    if tokio::time::timeout_at(deadline, woken).await.is_err() {
                        observe::wait_deadline_passed(&self.tool, since);
                        return Begun::Ended(Ended::Failed(Error::InProgress { key: self.key }));
                    }
                    observe::woken(&self.tool, since);
                }
                Answer::Completed(finished) => return self.replay(finished),
                Answer::Conflict { reason, first } => return self.conflict(reason, first),
            }
        }
    }

    /// A replay, with the note the call site chose.
    fn replay(self, finished: Finished) -> Begun {
        observe::found_finished(&self.tool, finished.ending);
        Begun::Ended(Ended::Replay {
            finished,
            note: self
                .policy
                .replay_note
                .unwrap_or(Cow::Borrowed(DEFAULT_REPLAY_NOTE)),
            key: self.key,
        })
    }

    /// A conflict, with the note the call site chose (or the other tool's).
    fn conflict(self, reason: ConflictReason, first: Option<Recorded>) -> Begun {
        observe::conflict(&self.tool, reason);
        Begun::Ended(Ended::Conflict {
            note: match reason {
                ConflictReason::OtherTool => Cow::Borrowed(OTHER_TOOL_NOTE),
                _ => self
                    .policy
                    .conflict_note
                    .unwrap_or(Cow::Borrowed(DEFAULT_CONFLICT_NOTE)),
            },
            reason,
            first,
        })
    }
}

/// How a call's claim went: known at once, or after a wait or I/O.
enum Begin {
    Now(Begun),
    Later(Pin<Box<dyn Future<Output = Begun> + Send>>),
}

/// A claim's end: act, or answer without acting.
enum Begun {
    Act(Acting),
    Ended(Ended),
}

/// A call that ended without acting.
enum Ended {
    Replay {
        key: Key,
        finished: Finished,
        note: Cow<'static, str>,
    },
    Conflict {
        reason: ConflictReason,
        first: Option<Recorded>,
        note: Cow<'static, str>,
    },
    Failed(Error),
}

impl Ended {
    fn into_result<T, E>(self, errors: Option<&ErrorCodec<E>>) -> Result<Outcome<T>, E>
    where
        T: DeserializeOwned + Clone + 'static,
        E: From<Error>,
    {
        match self {
            Ended::Replay {
                key,
                finished,
                note,
            } => match finished.ending {
                Ending::Ok => Ok(Outcome::Replay {
                    value: finished.value.decode::<T>()?,
                    note,
                }),
                Ending::Err => match errors {
                    Some(codec) => Err((codec.replay)(&finished.value)?),
                    // Another call site of this tool records errors; this
                    // one cannot read them, and must not act again.
                    None => Err(Error::UnknownOutcome { key }.into()),
                },
                Ending::Unknown => Err(Error::UnknownOutcome { key }.into()),
            },
            Ended::Conflict {
                reason,
                first,
                note,
            } => Ok(Outcome::Conflict {
                first: match first {
                    Some(first) => Some(first.decode::<T>()?),
                    None => None,
                },
                reason,
                note,
            }),
            Ended::Failed(error) => Err(error.into()),
        }
    }
}

/// A held claim whose action is about to run or running: the key it acts
/// as, for `current_key` and the re-entrancy check.
struct Acting {
    held: Held,
    active: active::Active,
    tool: ToolId,
}

impl Acting {
    fn new(key: Key, tool: ToolId, mut held: Held) -> Acting {
        held.renew_while_acting();
        Acting {
            held,
            active: active::Active::inside(key),
            tool,
        }
    }

    /// Records the finished action; see [`Held::complete`].
    fn complete(self, ending: Ending, value: Recorded) -> impl Future<Output = Result<(), Error>> {
        let Acting { held, active, tool } = self;
        let store = held.store();
        let finished = Finished {
            ending,
            value,
            finished_at: SystemTime::now(),
        };
        let recording = observe::timed(&*store, "complete", held.complete(finished));
        async move {
            match recording.await {
                Ok(()) => {
                    match ending {
                        Ending::Err => observe::error_recorded(&tool),
                        _ => observe::fresh(&tool),
                    }
                    Ok(())
                }
                Err(cause) => {
                    observe::not_recorded(&tool, &*store, &cause);
                    Err(not_recorded(active.into_key(), cause))
                }
            }
        }
    }

    /// Gives the claim up without a record; see [`Held::release`].
    async fn release(self) {
        let store = self.held.store();
        observe::timed(&*store, "release", self.held.release()).await;
        observe::released(&self.tool);
    }
}

/// Runs the call in its span (see [`observe::call_span`]).
pub(crate) fn drive<T, E, F>(
    call: Result<Call, Error>,
    action: F,
    errors: Option<ErrorCodec<E>>,
) -> impl Future<Output = Result<Outcome<T>, E>>
where
    F: Future<Output = Result<T, E>>,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    let span = match &call {
        Ok(call) => observe::call_span(&call.tool, &call.key, call.store.as_deref()),
        Err(_) => tracing::Span::none(),
    };
    tracing::Instrument::instrument(drive_in_span(call, action, errors), span)
}

/// Runs the call: the typed shim around [`Call::begin`] and the completion.
/// Only the action's own future and the result's conversions are generic.
async fn drive_in_span<T, E, F>(
    call: Result<Call, Error>,
    action: F,
    errors: Option<ErrorCodec<E>>,
) -> Result<Outcome<T>, E>
where
    F: Future<Output = Result<T, E>>,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    let begun = match call.map(Call::begin) {
        Ok(Begin::Now(begun)) => begun,
        Ok(Begin::Later(begun)) => begun.await,
        Err(error) => return Err(error.into()),
    };
    let acting = match begun {
        Begun::Act(acting) => acting,
        Begun::Ended(ended) => return ended.into_result(errors.as_ref()),
    };
    let mut action = pin!(action);
    let result = poll_fn(|cx| acting.active.poll_as(|| action.as_mut().poll(cx))).await;
    match result {
        Ok(value) => match acting
            .complete(Ending::Ok, Recorded::typed(value.clone()))
            .await
        {
            Ok(()) => Ok(Outcome::Fresh { value }),
            Err(error) => Err(with_result(error, &value).into()),
        },
        Err(err) => match &errors {
            Some(codec) => match acting.complete(Ending::Err, (codec.record)(&err)).await {
                Ok(()) => Err(err),
                Err(error) => Err(error.into()),
            },
            None => {
                acting.release().await;
                Err(err)
            }
        },
    }
}

pub(crate) struct ErrorCodec<E> {
    record: fn(&E) -> Recorded,
    replay: fn(&Recorded) -> Result<E, Error>,
}

impl<E: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> ErrorCodec<E> {
    pub(crate) fn recording() -> ErrorCodec<E> {
        ErrorCodec {
            record: |e: &E| Recorded::typed(e.clone()),
            replay: |r: &Recorded| r.decode::<E>(),
        }
    }
}

/// The error for an action that ran but whose result could not be recorded.
fn not_recorded(key: Key, cause: StoreError) -> Error {
    match cause {
        StoreError::LeaseLost => Error::LeaseLost { key },
        cause => Error::NotRecorded {
            key,
            result: None,
            cause,
        },
    }
}

/// Puts the unrecorded result into the error, so that it is not lost.
fn with_result<T: Serialize>(error: Error, value: &T) -> Error {
    match error {
        Error::NotRecorded { key, cause, .. } => Error::NotRecorded {
            key,
            result: serde_json::to_string(value).ok(),
            cause,
        },
        error => error,
    }
}
