//! The typed shim of a guarded call: it drives the claim, polls the
//! tool's action, and turns how it went into the tool's result.
//!
//! It is one hand-written state machine rather than an `async fn`: the
//! action is pinned in place, and the call is in one state at a time, so
//! the future a tool awaits is no larger than its action and the largest
//! state, and moving it (as every `async fn` around it does) copies little.
//!
//! The state machine ([`Core`]) sees the action only as a
//! `Pin<&mut dyn Future>`, so it is compiled once per result and error type,
//! not once per tool: what each tool instantiates is [`Drive::poll`], one
//! call.

use std::fmt;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::failure::{Classify, Failure};
use crate::observe;
use crate::outcome::Outcome;
use crate::store::record::RecordState;
use crate::store::record::RecordValue;

use super::acting::{Acting, Completing, Releasing};
use super::call::Call;
use super::claim::{Begin, Begun, Replayed};
use super::codec::ErrorCodec;
use super::verify::{Checked, unknown_detail};

/// The error's text, if it says the action may have taken effect.
pub(crate) fn unknown_error<E: Classify + fmt::Display>(err: &E) -> Option<String> {
    (err.failure() == Failure::Unknown).then(|| err.to_string())
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
    drive_classified(call, action, errors, None)
}

/// [`drive`], with `unknown` telling which of the action's errors may have
/// taken effect (it returns the error's text for the record).
pub(crate) fn drive_classified<T, E, F>(
    call: Result<Call, Error>,
    action: F,
    errors: Option<ErrorCodec<E>>,
    unknown: Option<fn(&E) -> Option<String>>,
) -> impl Future<Output = Result<Outcome<T>, E>>
where
    F: Future<Output = Result<T, E>>,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    Drive {
        action,
        core: Core::new(call, errors, unknown),
    }
}

pin_project_lite::pin_project! {
    /// A guarded call: the tool's action, and the [`Core`] that claims,
    /// polls the action under its key, and completes or releases.
    struct Drive<F, T, E> {
        // Declared first, so dropped first: a call dropped while acting
        // stops its action before its claim is released.
        #[pin]
        action: F,
        core: Core<T, E>,
    }
}

impl<F, T, E> Future for Drive<F, T, E>
where
    F: Future<Output = Result<T, E>>,
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    type Output = Result<Outcome<T>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        this.core.poll(this.action, cx)
    }
}

/// The claim, the action's polls and the completion of a guarded call, in
/// its span (see [`observe::call_span`]).
struct Core<T, E> {
    state: State<T, E>,
    errors: Option<ErrorCodec<E>>,
    unknown: Option<fn(&E) -> Option<String>>,
    span: tracing::Span,
}

/// Where a guarded call is.
enum State<T, E> {
    /// Not polled yet.
    Start(Result<Call, Error>),
    /// Waiting for a store that does I/O, or for a call in flight.
    Claiming(Pin<Box<dyn Future<Output = Begun> + Send>>),
    /// Holding the claim; the action runs.
    Acting(Acting),
    /// The action returned this value, which is being recorded.
    Completing(Completing, T),
    /// The action returned this final error, which is being recorded.
    RecordingError(Completing, E),
    /// The action returned this error; the claim is being released.
    Releasing(Releasing, E),
    /// The action returned an error after which it may have taken effect;
    /// the provider is being asked.
    Verifying(Box<Verifying<E>>),
    /// Completion, or unwinding from a panic in the action.
    Done,
}

impl<T, E> Core<T, E>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    /// A call not polled yet, in its span.
    fn new(
        call: Result<Call, Error>,
        errors: Option<ErrorCodec<E>>,
        unknown: Option<fn(&E) -> Option<String>>,
    ) -> Core<T, E> {
        let span = match &call {
            Ok(call) => observe::call_span(&call.tool, call.key.as_str(), call.store.as_deref()),
            Err(_) => tracing::Span::none(),
        };
        Core {
            state: State::Start(call),
            errors,
            unknown,
            span,
        }
    }

    fn poll(
        &mut self,
        mut action: Pin<&mut dyn Future<Output = Result<T, E>>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Outcome<T>, E>> {
        let Core {
            state,
            errors,
            unknown,
            span,
        } = self;
        let _in_span = span.enter();
        // What a store that answers at once lent the claim, read as `T`.
        let mut replayed = None;
        let replayed = &mut replayed;
        loop {
            // Each state is taken out, and put back if it must wait.
            // A call not started is begun in place, not moved out: a
            // replay from memory then ends without moving it at all.
            if let State::Start(Ok(call)) = state {
                let begun = call.begin(&mut |finished| {
                    *replayed = Some(Replayed::read(finished, errors.as_ref()));
                });
                match begun {
                    Begin::Now(Begun::Act(acting)) => {
                        // Done while the action is polled: a panic in it
                        // leaves the call done, its claim dropped with it.
                        *state = State::Done;
                        if let Some(polled) =
                            act(state, acting, action.as_mut(), cx, errors, *unknown)
                        {
                            return polled;
                        }
                    }
                    Begin::Now(Begun::Ended(ended)) => {
                        *state = State::Done;
                        return Poll::Ready(ended.into_result(errors.as_ref(), replayed.take()));
                    }
                    Begin::Later(claiming) => *state = State::Claiming(claiming),
                }
                continue;
            }
            let next = match mem::replace(state, State::Done) {
                State::Start(Err(error)) => return Poll::Ready(Err(error.into())),
                // Begun in place, above.
                start @ State::Start(Ok(_)) => {
                    *state = start;
                    continue;
                }
                State::Claiming(mut claiming) => match claiming.as_mut().poll(cx) {
                    Poll::Ready(begun) => begun,
                    Poll::Pending => {
                        *state = State::Claiming(claiming);
                        return Poll::Pending;
                    }
                },
                State::Acting(acting) => {
                    match act(state, acting, action.as_mut(), cx, errors, *unknown) {
                        Some(polled) => return polled,
                        None => continue,
                    }
                }
                State::Completing(mut completing, value) => {
                    return match Pin::new(&mut completing).poll(cx) {
                        Poll::Ready(Ok(())) => Poll::Ready(Ok(Outcome::Fresh { value })),
                        Poll::Ready(Err(error)) => {
                            Poll::Ready(Err(with_result(error, &value).into()))
                        }
                        Poll::Pending => {
                            *state = State::Completing(completing, value);
                            Poll::Pending
                        }
                    };
                }
                State::RecordingError(mut completing, err) => {
                    return match Pin::new(&mut completing).poll(cx) {
                        Poll::Ready(Ok(())) => Poll::Ready(Err(err)),
                        Poll::Ready(Err(error)) => Poll::Ready(Err(error.into())),
                        Poll::Pending => {
                            *state = State::RecordingError(completing, err);
                            Poll::Pending
                        }
                    };
                }
                State::Verifying(mut verifying) => {
                    *state = match verifying.checking.as_mut().poll(cx) {
                        Poll::Pending => {
                            *state = State::Verifying(verifying);
                            return Poll::Pending;
                        }
                        Poll::Ready(checked) => (*verifying).end(checked),
                    };
                    continue;
                }
                State::Releasing(mut releasing, err) => {
                    return match Pin::new(&mut releasing).poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Err(err)),
                        Poll::Pending => {
                            *state = State::Releasing(releasing, err);
                            Poll::Pending
                        }
                    };
                }
                // Polled again after it was completed: it never will again.
                State::Done => return Poll::Pending,
            };
            match next {
                Begun::Act(acting) => {
                    if let Some(polled) = act(state, acting, action.as_mut(), cx, errors, *unknown)
                    {
                        return polled;
                    }
                }
                Begun::Ended(ended) => {
                    return Poll::Ready(ended.into_result(errors.as_ref(), replayed.take()));
                }
            }
        }
    }
}

/// Polls the action of a held claim, with `state` left done meanwhile; an
/// action that is ready has its result recorded at once, and a completion
/// that is ready too ends the call without the state being written. `None`
/// means `state` holds what comes next, to be polled in turn.
#[inline(always)]
fn act<T, E>(
    state: &mut State<T, E>,
    mut acting: Acting,
    action: Pin<&mut dyn Future<Output = Result<T, E>>>,
    cx: &mut Context<'_>,
    errors: &Option<ErrorCodec<E>>,
    unknown: Option<fn(&E) -> Option<String>>,
) -> Option<Poll<Result<Outcome<T>, E>>>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    E: From<Error>,
{
    acting.may_take_effect();
    *state = match acting.active.poll_as(|| action.poll(cx)) {
        Poll::Pending => {
            *state = State::Acting(acting);
            return Some(Poll::Pending);
        }
        Poll::Ready(Ok(value)) => {
            let mut completing =
                acting.complete(RecordState::Done, RecordValue::typed(value.clone()));
            return Some(match Pin::new(&mut completing).poll(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(Outcome::Fresh { value })),
                Poll::Ready(Err(error)) => Poll::Ready(Err(with_result(error, &value).into())),
                Poll::Pending => {
                    *state = State::Completing(completing, value);
                    Poll::Pending
                }
            });
        }
        Poll::Ready(Err(err)) => match (errors, unknown.and_then(|f| f(&err))) {
            (Some(codec), _) => State::RecordingError(
                acting.complete(RecordState::Failed, (codec.record)(&err)),
                err,
            ),
            (None, Some(error)) => Verifying::start(acting, err, error),
            (None, None) => State::Releasing(acting.release(), err),
        },
    };
    None
}

/// An action that failed in a way that may have taken effect, while the
/// provider is asked whether it did.
struct Verifying<E> {
    acting: Acting,
    checking: Pin<Box<dyn Future<Output = Checked> + Send>>,
    err: E,
    /// The error's text, for the record if nobody can tell.
    error: String,
}

impl<E> Verifying<E> {
    /// Asks the call's verification, if it has one; otherwise records the
    /// outcome as unknown.
    fn start<T>(mut acting: Acting, err: E, error: String) -> State<T, E> {
        let Some(v) = acting.take_verification() else {
            let why = "the action failed in a way that may have taken effect";
            let detail = unknown_detail(why, Some(&error));
            return State::RecordingError(acting.complete(RecordState::Unknown, detail), err);
        };
        let checking = Box::pin(v.ask(acting.active.key().clone()));
        State::Verifying(Box::new(Verifying {
            acting,
            checking,
            err,
            error,
        }))
    }

    /// What the provider's answer leads to: the result it applied,
    /// recorded; the claim released, as after a definite failure; or the
    /// outcome recorded as unknown.
    fn end<T>(self, checked: Checked) -> State<T, E>
    where
        T: DeserializeOwned + Clone + 'static,
    {
        let Verifying {
            acting, err, error, ..
        } = self;
        let why = match checked {
            Checked::NotApplied => return State::Releasing(acting.release(), err),
            Checked::Applied(record) => match record.decode::<T>() {
                Ok(value) => {
                    return State::Completing(acting.complete(RecordState::Done, record), value);
                }
                Err(_) => "the verification's result does not read as the tool's".to_owned(),
            },
            Checked::Unknown(why) => why,
        };
        let detail = unknown_detail(&why, Some(&error));
        State::RecordingError(acting.complete(RecordState::Unknown, detail), err)
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
