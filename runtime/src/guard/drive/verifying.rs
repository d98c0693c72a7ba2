//! A guarded call whose action failed in a way that may have taken effect,
//! while the provider is asked whether it did.

use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;

use super::State;
use crate::guard::acting::Acting;
use crate::guard::verify::{Checked, unknown_detail};
use crate::store::record::RecordState;

/// An action that failed in a way that may have taken effect, while the
/// provider is asked whether it did.
pub(super) struct Verifying<E> {
    acting: Acting,
    pub(super) checking: Pin<Box<dyn Future<Output = Checked> + Send>>,
    err: E,
    /// The error's text, for the record if nobody can tell.
    error: String,
}

impl<E> Verifying<E> {
    /// Asks the call's verification, if it has one; otherwise records the
    /// outcome as unknown.
    pub(super) fn start<T>(mut acting: Acting, err: E, error: String) -> State<T, E> {
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
    pub(super) fn end<T>(self, checked: Checked) -> State<T, E>
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
