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

/// Whether a name is that of a call's id, as the model APIs and agent
/// frameworks name one: `call_id`, `tool_call_id`, `tool_use_id`,
/// `function_call_id`, `invocation_id` or `request_id`. Only ASCII letters
/// and digits count, in lower case, so `toolUseId`, `TOOL_USE_ID` and
/// `tool-use-id` are `tool_use_id`. The attribute refuses the same names in
/// a key (`macros/src/names.rs`).
pub(crate) fn is_call_id_name(name: &str) -> bool {
    // Every one ends in `id`: most names of a fingerprinted value are
    // turned away at their last letter.
    let last = name.bytes().rev().find(u8::is_ascii_alphanumeric);
    if !matches!(last, Some(b'd' | b'D')) {
        return false;
    }
    // The longest of the names, squashed, is 14 bytes.
    let mut squashed = [0u8; 16];
    let mut len = 0;
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() {
            let Some(slot) = squashed.get_mut(len) else {
                return false;
            };
            *slot = byte.to_ascii_lowercase();
            len += 1;
        } else if !byte.is_ascii() {
            return false;
        }
    }
    matches!(
        squashed.get(..len),
        Some(
            b"callid"
                | b"toolcallid"
                | b"tooluseid"
                | b"functioncallid"
                | b"invocationid"
                | b"requestid"
        )
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_id_name_is_read_in_any_case_and_with_any_separator() {
        for name in [
            "call_id",
            "tool_call_id",
            "toolCallId",
            "TOOL_USE_ID",
            "tool-use-id",
            "function_call_id",
            "invocationId",
            "RequestID",
        ] {
            assert!(is_call_id_name(name), "{name}");
        }
        for name in [
            "order_id",
            "run_id",
            "id",
            "recall_id",
            "call",
            "tóol_call_id",
            "",
        ] {
            assert!(!is_call_id_name(name), "{name}");
        }
    }
}
