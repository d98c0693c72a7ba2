//! What a finished action leaves behind: its result, and how it ended.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::store::StoreError;
pub use crate::store::state::RecordState;

// Kept with each result; re-exported here while callers move to `crate::tool`.

trait Erased: Any + Send + Sync {
    fn to_json(&self) -> serde_json::Result<String>;
    fn as_any(&self) -> &dyn Any;
}

/// A typed value, which knows how to check its own JSON.
struct Typed<T>(T);

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Erased for Typed<T> {
    /// The value's JSON, once it is known to read back as the same value:
    /// a replay must never trip over what the first call recorded.
    fn to_json(&self) -> serde_json::Result<String> {
        let json = serde_json::to_string(&self.0)?;
        let back: T = serde_json::from_str(&json)?;
        // Compared as JSON values, so a map's order does not matter.
        if serde_json::to_value(&back)? != serde_json::from_str::<serde_json::Value>(&json)? {
            return Err(serde::ser::Error::custom(
                "the value reads back from its JSON as a different value",
            ));
        }
        Ok(json)
    }
    fn as_any(&self) -> &dyn Any {
        &self.0
    }
}

#[derive(Clone)]
enum Repr {
    Typed(Arc<dyn Erased>),
    Json(Arc<str>),
}

/// A recorded value: the result (or recorded error) of a finished action.
///
/// The memory store keeps the typed value and replays a clone of it; durable
/// stores keep its JSON and replay it byte for byte. Cloning is cheap.
#[derive(Clone)]
pub struct RecordValue(Repr);

impl RecordValue {
    /// Records a typed value.
    pub fn typed<T: Serialize + DeserializeOwned + Send + Sync + 'static>(value: T) -> RecordValue {
        RecordValue(Repr::Typed(Arc::new(Typed(value))))
    }

    /// A value read back from a store, as JSON text.
    pub fn from_json(json: impl Into<Arc<str>>) -> RecordValue {
        RecordValue(Repr::Json(json.into()))
    }

    /// The value as JSON text, for a store to write. Fails with
    /// [`StoreError::Unrecordable`] if the value does not serialize, or does
    /// not read back as itself (a `NaN` would be written as `null`): a store
    /// then refuses to complete with it, rather than keep a record that every
    /// replay would trip over.
    pub fn to_json(&self) -> Result<Cow<'_, str>, StoreError> {
        match &self.0 {
            Repr::Typed(value) => value
                .to_json()
                .map(Cow::Owned)
                .map_err(StoreError::Unrecordable),
            Repr::Json(json) => Ok(Cow::Borrowed(json)),
        }
    }

    /// Reads the value back as `T`.
    pub fn decode<T: DeserializeOwned + Clone + 'static>(&self) -> Result<T, serde_json::Error> {
        match &self.0 {
            Repr::Typed(value) => match value.as_any().downcast_ref::<T>() {
                Some(value) => Ok(value.clone()),
                None => {
                    let json = value.to_json()?;
                    serde_json::from_str(&json)
                }
            },
            Repr::Json(json) => serde_json::from_str(json),
        }
    }
}

impl fmt::Debug for RecordValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Typed(_) => f.write_str("RecordValue(<typed>)"),
            Repr::Json(json) => write!(f, "RecordValue({json})"),
        }
    }
}

/// What [`Store::complete`](crate::store::Store::complete) writes: the
/// record a claim leaves once its action is over.
#[derive(Debug, Clone)]
pub struct Completion {
    /// [`Done`](RecordState::Done), [`Failed`](RecordState::Failed) or
    /// [`Unknown`](RecordState::Unknown); never `Held`.
    pub state: RecordState,
    /// Its result or its recorded error (JSON `null` for an unknown outcome).
    pub value: RecordValue,
    /// When the claim was completed.
    pub completed_at: SystemTime,
}
