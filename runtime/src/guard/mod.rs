//! The claim-first guard: how one guarded call runs.

use std::borrow::Cow;
use std::future::Future;
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

use held::{Answer, Asked};

mod active;
mod held;

pub(crate) use active::acting_as;
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

    /// Replaces the whole policy.
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
        // Returned as it is, not awaited in another async layer: the
        // future stays one state machine.
        let span = observe::call_span(&self.tool, &self.key, self.store.as_deref());
        tracing::Instrument::instrument(self.execute(action, None), span)
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
        let codec = ErrorCodec {
            record: |e: &E| Recorded::typed(e.clone()),
            replay: |r: &Recorded| r.decode::<E>(),
        };
        let span = observe::call_span(&self.tool, &self.key, self.store.as_deref());
        tracing::Instrument::instrument(self.execute(action, Some(codec)), span)
    }

    async fn execute<T, E, F>(
        self,
        action: F,
        errors: Option<ErrorCodec<E>>,
    ) -> Result<Outcome<T>, E>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error>,
    {
        let Call {
            key,
            tool,
            fingerprint,
            policy,
            store,
        } = self;
        if active::is_acting(&key) {
            return Err(Error::Reentrant { key }.into());
        }
        let store = store.unwrap_or_else(default_store);

        let mut deadline = None;
        let mut held = loop {
            let asked = Asked {
                key: &key,
                tool: &tool,
                fingerprint,
                lease: policy.lease,
                retention: policy.retention,
            };
            let claimed = observe::timed(&*store, "claim", held::claim(&store, asked)).await;
            match claimed.map_err(|e| observe::store_failed(&tool, &*store, "claim", e))? {
                Answer::Claimed(held) => {
                    observe::claimed(&tool, held.fence(), held.taken_over());
                    break held;
                }
                Answer::Completed(finished) => {
                    observe::found_finished(&tool, finished.ending);
                    return replay(&key, &policy, finished, errors.as_ref());
                }
                Answer::Conflict { reason, first } => {
                    observe::conflict(&tool, reason);
                    let note = match reason {
                        ConflictReason::OtherTool => Cow::Borrowed(OTHER_TOOL_NOTE),
                        _ => policy
                            .conflict_note
                            .clone()
                            .unwrap_or(Cow::Borrowed(DEFAULT_CONFLICT_NOTE)),
                    };
                    let first = match first {
                        Some(first) => Some(first.decode::<T>()?),
                        None => None,
                    };
                    return Ok(Outcome::Conflict {
                        first,
                        reason,
                        note,
                    });
                }
                Answer::InFlight(woken) => {
                    let deadline = *deadline.get_or_insert_with(|| Instant::now() + policy.wait);
                    let since = observe::waiting(&tool, deadline, policy.wait);
                    if tokio::time::timeout_at(deadline, woken).await.is_err() {
                        observe::wait_deadline_passed(&tool, since);
                        return Err(Error::InProgress { key }.into());
                    }
                    observe::woken(&tool, since);
                }
            }
        };

        if held.taken_over() && policy.takeover == Takeover::ReportUnknown {
            let unknown = Finished {
                ending: Ending::Unknown,
                value: Recorded::from_json("null"),
                finished_at: SystemTime::now(),
            };
            // Nothing ran here: if the unknown outcome cannot be recorded, the
            // claim stays held and the next caller decides again.
            let recorded = observe::timed(&*store, "complete", held.complete(unknown)).await;
            recorded.map_err(|e| observe::store_failed(&tool, &*store, "complete", e))?;
            observe::unknown_outcome(&tool, true);
            return Err(Error::UnknownOutcome { key }.into());
        }

        held.renew_while_acting();
        let result = acting_as(key.clone(), action).await;

        match result {
            Ok(value) => {
                let finished = Finished {
                    ending: Ending::Ok,
                    value: Recorded::typed(value.clone()),
                    finished_at: SystemTime::now(),
                };
                match observe::timed(&*store, "complete", held.complete(finished)).await {
                    Ok(()) => {
                        observe::fresh(&tool);
                        Ok(Outcome::Fresh { value })
                    }
                    Err(cause) => {
                        observe::not_recorded(&tool, &*store, &cause);
                        Err(not_recorded(key, cause, Some(&value)).into())
                    }
                }
            }
            Err(err) => match &errors {
                Some(codec) => {
                    let finished = Finished {
                        ending: Ending::Err,
                        value: (codec.record)(&err),
                        finished_at: SystemTime::now(),
                    };
                    match observe::timed(&*store, "complete", held.complete(finished)).await {
                        Ok(()) => {
                            observe::error_recorded(&tool);
                            Err(err)
                        }
                        Err(cause) => {
                            observe::not_recorded(&tool, &*store, &cause);
                            Err(not_recorded::<T>(key, cause, None).into())
                        }
                    }
                }
                None => {
                    observe::timed(&*store, "release", held.release()).await;
                    observe::released(&tool);
                    Err(err)
                }
            },
        }
    }
}

struct ErrorCodec<E> {
    record: fn(&E) -> Recorded,
    replay: fn(&Recorded) -> Result<E, Error>,
}

/// The error for an action that ran but whose result could not be recorded.
fn not_recorded<T: Serialize>(key: Key, cause: StoreError, value: Option<&T>) -> Error {
    match cause {
        StoreError::LeaseLost => Error::LeaseLost { key },
        cause => Error::NotRecorded {
            key,
            result: value.and_then(|value| serde_json::to_string(value).ok()),
            cause,
        },
    }
}

fn replay<T, E>(
    key: &Key,
    policy: &Policy,
    finished: Finished,
    errors: Option<&ErrorCodec<E>>,
) -> Result<Outcome<T>, E>
where
    T: DeserializeOwned + Clone + 'static,
    E: From<Error>,
{
    match finished.ending {
        Ending::Ok => Ok(Outcome::Replay {
            value: finished.value.decode::<T>()?,
            note: policy
                .replay_note
                .clone()
                .unwrap_or(Cow::Borrowed(DEFAULT_REPLAY_NOTE)),
        }),
        Ending::Err => match errors {
            Some(codec) => Err((codec.replay)(&finished.value)?),
            // Another call site of this tool records errors; this one cannot
            // read them, and must not act again.
            None => Err(Error::UnknownOutcome { key: key.clone() }.into()),
        },
        Ending::Unknown => Err(Error::UnknownOutcome { key: key.clone() }.into()),
    }
}
