//! The typed shim of a guarded call: it drives the claim, polls the
//! tool's action, and turns the ending into the tool's result.

use std::future::{Future, poll_fn};
use std::pin::pin;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::observe;
use crate::outcome::Outcome;
use crate::record::{Ending, Recorded};

use super::call::Call;
use super::claim::{Begin, Begun};

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
    pub(super) record: fn(&E) -> Recorded,
    pub(super) replay: fn(&Recorded) -> Result<E, Error>,
}

impl<E: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> ErrorCodec<E> {
    pub(crate) fn recording() -> ErrorCodec<E> {
        ErrorCodec {
            record: |e: &E| Recorded::typed(e.clone()),
            replay: |r: &Recorded| r.decode::<E>(),
        }
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
