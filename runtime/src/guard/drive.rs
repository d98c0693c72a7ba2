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

mod verifying;

use verifying::Verifying;

impl Call {
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

    /// Like [`Call::run`], for an action whose error says whether it may
    /// have taken effect ([`Classify`]). A [definite](Failure::Definite)
    /// error releases the claim, as [`Call::run`] does, and a retry acts
    /// again. An [unknown](Failure::Unknown) one never releases it: the
    /// call's [verification](Call::verify) asks the provider (its result
    /// is recorded and returned if the action happened; the claim is
    /// released if it did not), and without one, or when it cannot tell,
    /// the outcome is recorded as unknown, so every later call gets
    /// [`Error::UnknownOutcome`] until an operator resolves it. The call
    /// itself returns the action's error.
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// use std::sync::Arc;
    /// use idempotent_tools::call::{Call, Key};
    /// use idempotent_tools::{Classify, Error, Failure, MemoryStore};
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// enum SendError {
    ///     #[error("the mail server did not answer")]
    ///     Network(#[from] std::io::Error),
    ///     #[error(transparent)]
    ///     Idempotency(#[from] Error),
    /// }
    ///
    /// impl Classify for SendError {
    ///     fn failure(&self) -> Failure {
    ///         match self {
    ///             SendError::Network(err) => err.failure(),
    ///             SendError::Idempotency(_) => Failure::Definite,
    ///         }
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryStore::new());
    /// let key = Key::builder().literal("run-1:email:")?.part("ticket", "77")?.finish()?;
    /// let send = || Call::new("mail::send", key.clone()).store(&store);
    ///
    /// // The mail may have gone out before the connection timed out.
    /// let timed_out = send()
    ///     .run_classified(async { Err::<(), _>(SendError::from(std::io::Error::from(ErrorKind::TimedOut))) })
    ///     .await;
    /// assert!(matches!(timed_out, Err(SendError::Network(_))));
    ///
    /// // The retry does not send it again: the outcome is unknown.
    /// let retry = send().run_classified(async { Ok::<(), SendError>(()) }).await;
    /// assert!(matches!(retry, Err(SendError::Idempotency(Error::UnknownOutcome { .. }))));
    /// # Ok(()) }
    /// ```
    pub fn run_classified<T, E, F>(self, action: F) -> impl Future<Output = Result<Outcome<T>, E>>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Classify + fmt::Display,
    {
        drive_classified(Ok(self), action, None, Some(unknown_error::<E>))
    }
}

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
