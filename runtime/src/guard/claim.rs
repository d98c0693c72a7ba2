//! The claim: everything a call does before its action, with no type of
//! the tool's in it, so it is compiled once for every tool.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::Error;
use crate::key::{Key, PendingKey};
use crate::observe;
use crate::outcome::{
    ConflictReason, DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE, OTHER_TOOL_NOTE, Outcome,
};
use crate::policy::Takeover;
use crate::record::{Ending, Finished, Recorded};
use crate::store::{Store, StoreResult, default_store};

use super::acting::Acting;
use super::active;
use super::call::Call;
use super::drive::ErrorCodec;
use super::held::{self, Answer, Asked, Held};

impl Call {
    /// Claims the key: everything before the action, with no type of the
    /// tool's in it, so it is compiled once for every tool. A store that
    /// answers at once is answered here, with no future at all; a store
    /// that does I/O, or a duplicate that must wait, gets one boxed future.
    pub(super) fn begin(mut self) -> Begin {
        if active::is_acting(self.key.as_str()) {
            return Begin::Now(Begun::Ended(Ended::Failed(Error::Reentrant {
                key: self.key.into_key(),
            })));
        }
        let store = match &self.store {
            Some(store) => Arc::clone(store),
            None => default_store(),
        };
        if !store.answers_at_once() {
            return Begin::Later(Box::pin(self.claiming(store, None)));
        }
        // A repeat of a finished call is found by the key's text, so its
        // key is never made a shared value; any other call claims the key.
        enum Probed {
            Replay(Finished),
            Claimed(Key, Option<StoreResult<Answer>>),
        }
        let probed = observe::timed_now(&*store, "claim", || {
            if let Some(finished) =
                store.replay_at_once(self.key.as_str(), &self.tool, self.fingerprint)
            {
                return Probed::Replay(finished);
            }
            let key = self.key.share().clone();
            let ready = held::claim(&store, self.asked(&key)).into_ready().ok();
            Probed::Claimed(key, ready)
        });
        let (key, ready) = match probed {
            Probed::Replay(finished) => return Begin::Now(self.replay(finished)),
            Probed::Claimed(key, ready) => (key, ready),
        };
        // A store that said it answers at once, and did not, is asked again
        // the long way.
        let Some(answer) = ready else {
            return Begin::Later(Box::pin(self.claiming(store, None)));
        };
        match answer {
            Ok(Answer::Claimed(held)) if !self.reports_takeover(&held) => {
                observe::claimed(&self.tool, held.fence(), held.taken_over());
                Begin::Now(Begun::Act(Acting::new(key, self.tool, held)))
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

    fn asked<'a>(&'a self, key: &'a Key) -> Asked<'a> {
        Asked {
            key,
            tool: &self.tool,
            fingerprint: self.fingerprint,
            lease: self.policy.get().lease,
            retention: self.policy.get().retention,
        }
    }

    fn reports_takeover(&self, held: &Held) -> bool {
        held.taken_over() && self.policy.get().takeover == Takeover::ReportUnknown
    }

    /// The claim loop for stores that do I/O, and for duplicates that wait
    /// for a call in flight. `first` is an answer already in hand.
    async fn claiming(mut self, store: Arc<dyn Store>, mut first: Option<Answer>) -> Begun {
        let key = self.key.share().clone();
        let mut deadline = None;
        loop {
            let answer = match first.take() {
                Some(answer) => answer,
                None => {
                    match observe::timed(&*store, "claim", held::claim(&store, self.asked(&key)))
                        .await
                    {
                        Ok(answer) => answer,
                        Err(cause) => {
                            let cause = observe::store_failed(&self.tool, &*store, "claim", cause);
                            return Begun::Ended(Ended::Failed(cause));
                        }
                    }
                }
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
                    return Begun::Ended(Ended::Failed(Error::UnknownOutcome { key }));
                }
                Answer::Claimed(held) => {
                    observe::claimed(&self.tool, held.fence(), held.taken_over());
                    return Begun::Act(Acting::new(key, self.tool, held));
                }
                Answer::InFlight(woken) => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + self.policy.get().wait);
                    let since = observe::waiting(&self.tool, deadline, self.policy.get().wait);
                    if tokio::time::timeout_at(deadline, woken).await.is_err() {
                        observe::wait_deadline_passed(&self.tool, since);
                        return Begun::Ended(Ended::Failed(Error::InProgress { key }));
                    }
                    observe::woken(&self.tool, since);
                }
                Answer::Completed(finished) => return self.replay(finished),
                Answer::Conflict { reason, first } => return self.conflict(reason, first),
            }
        }
    }

    /// A replay, with the note the call site chose.
    fn replay(mut self, finished: Finished) -> Begun {
        observe::found_finished(&self.tool, finished.ending);
        Begun::Ended(Ended::Replay {
            finished,
            note: self
                .policy
                .take_replay_note()
                .unwrap_or(Cow::Borrowed(DEFAULT_REPLAY_NOTE)),
            key: self.key,
        })
    }

    /// A conflict, with the note the call site chose (or the other tool's).
    fn conflict(mut self, reason: ConflictReason, first: Option<Recorded>) -> Begun {
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
    pub(super) fn into_result<T, E>(self, errors: Option<&ErrorCodec<E>>) -> Result<Outcome<T>, E>
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
                    None => Err(Error::UnknownOutcome {
                        key: key.into_key(),
                    }
                    .into()),
                },
                Ending::Unknown => Err(Error::UnknownOutcome {
                    key: key.into_key(),
                }
                .into()),
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
