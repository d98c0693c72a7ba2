//! A framework's tool-call id, which must never name an action.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::fingerprint::is_fingerprinting;

/// A tool-call id, as a framework hands it to a tool.
///
/// It is new for every call the model makes, so two identical asks carry two
/// ids: it must never be an idempotency key. It does not implement
/// [`KeyPart`](crate::KeyPart), and `#[idempotent]` refuses it in a key.
/// A fingerprint skips it wherever it sits (an `Option<CallId>` argument, a
/// field of an argument struct), so a repeat under a new id is a replay, not
/// a conflict; it skips a field named as a call id (`tool_call_id`,
/// `toolUseId`, ...) of any type too. Its text is private and read with
/// [`as_str`](CallId::as_str), so a key template cannot reach it through
/// `.0` either. Keep it for logs and tracing.
///
/// ```
/// use idempotent_tools::CallId;
///
/// let id = CallId::new("call_7");
/// assert_eq!(id.as_str(), "call_7");
/// assert_eq!(serde_json::to_string(&id)?, "\"call_7\"");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CallId(String);

impl CallId {
    /// A call id from the framework's text.
    pub fn new(id: impl Into<String>) -> CallId {
        CallId(id.into())
    }

    /// Unwraps the id's text.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for CallId {
    fn from(id: String) -> CallId {
        CallId(id)
    }
}

impl From<&str> for CallId {
    fn from(id: &str) -> CallId {
        CallId(id.to_owned())
    }
}

impl Serialize for CallId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if is_fingerprinting() {
            serializer.serialize_unit()
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for CallId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(CallId)
    }
}

impl fmt::Debug for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallId({:?})", self.0)
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
