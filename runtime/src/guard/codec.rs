//! How a tool's error is recorded and replayed, for a call whose errors
//! are final ([`Call::run_recording_errors`](super::Call::run_recording_errors)).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::store::record::RecordValue;

/// Records a tool's error as the call's result, and reads it back for a
/// replay.
pub(crate) struct ErrorCodec<E> {
    pub(super) record: fn(&E) -> RecordValue,
    pub(super) replay: fn(&RecordValue) -> Result<E, Error>,
}

impl<E: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> ErrorCodec<E> {
    pub(crate) fn recording() -> ErrorCodec<E> {
        ErrorCodec {
            record: |e: &E| RecordValue::typed(e.clone()),
            replay: |r: &RecordValue| r.decode::<E>().map_err(Error::Codec),
        }
    }
}
