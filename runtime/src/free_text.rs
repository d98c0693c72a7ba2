//! Text the model words freely, which must never name an action.

use std::fmt;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::fingerprint::is_fingerprinting;

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
        if is_fingerprinting() {
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
