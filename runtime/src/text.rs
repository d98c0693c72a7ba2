//! Values that must never name an action: model-authored free text and
//! tool-call ids.

use std::cell::Cell;
use std::fmt;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

thread_local! {
    static FINGERPRINTING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with [`FreeText`] and [`CallId`] serializing as nothing, so that
/// a fingerprint never covers free text or a call id, wherever they sit: an
/// argument, an `Option`, a field of an argument struct.
pub(crate) fn fingerprinting<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            FINGERPRINTING.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(FINGERPRINTING.with(|c| c.replace(true)));
    f()
}

/// Text the model words freely: a reason, a note, a message body.
///
/// The model says it differently each time it asks, so it must stay out of
/// the key and out of the fingerprint. `FreeText` does not implement
/// [`KeyPart`](crate::KeyPart), so putting it in a key is a compile error,
/// and a fingerprint skips it, even as a field of an argument struct.
///
/// It serializes and deserializes as the inner value, so it fits in a tool's
/// JSON arguments unchanged.
///
/// The inner value is private, and read through [`as_str`](FreeText::as_str),
/// [`Deref`] or [`into_inner`](FreeText::into_inner): a key template cannot
/// reach it either (`<args.reason.0>` does not compile).
///
/// ```
/// use idempotent_tools::FreeText;
///
/// let reason: FreeText<String> = serde_json::from_str("\"customer asked\"")?;
/// assert_eq!(reason.as_str(), "customer asked");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FreeText<T = String>(T);

impl<T> FreeText<T> {
    /// Wraps model-authored text.
    pub const fn new(text: T) -> FreeText<T> {
        FreeText(text)
    }

    /// Unwraps the text.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T: AsRef<str>> FreeText<T> {
    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.as_ref()
    }
}

impl<T> Deref for FreeText<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for FreeText<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> From<T> for FreeText<T> {
    fn from(value: T) -> FreeText<T> {
        FreeText(value)
    }
}

impl<T: fmt::Debug> fmt::Debug for FreeText<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: fmt::Display> fmt::Display for FreeText<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for FreeText<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if FINGERPRINTING.with(Cell::get) {
            serializer.serialize_unit()
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for FreeText<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(FreeText)
    }
}

/// A tool-call id, as a framework hands it to a tool.
///
/// It is new for every call the model makes, so two identical asks carry two
/// ids: it must never be an idempotency key. It does not implement
/// [`KeyPart`](crate::KeyPart), and `#[idempotent]` refuses it in a key.
/// A fingerprint skips it wherever it sits (an `Option<CallId>` argument, a
/// field of an argument struct), so a repeat under a new id is a replay, not
/// a conflict. Its text is private and read with [`as_str`](CallId::as_str),
/// so a key template cannot reach it through `.0` either. Keep it for logs
/// and tracing.
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
        if FINGERPRINTING.with(Cell::get) {
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
