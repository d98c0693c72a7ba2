//! [`Call::run`] and its two kinds: how a user's call is driven (see
//! `drive`).

use std::fmt;
use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::call::Call;
use super::codec::ErrorCodec;
use super::drive::{drive, drive_classified, unknown_error};
use crate::error::Error;
use crate::failure::Classify;
use crate::outcome::Outcome;

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
    /// have taken effect ([`Classify`]). A [definite](crate::Failure::Definite)
    /// error releases the claim, as [`Call::run`] does, and a retry acts
    /// again. An [unknown](crate::Failure::Unknown) one never releases it: the
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
