//! Idempotency keys: what an action is, rendered so that two asks for the same
//! thing give the same key and two different things never do.
//!
//! `builder` renders a key from a template's literals and parts, `part`
//! escapes each value, `parse` reads a key back from its text, and `error`
//! says why a key could not be had; `pending` keeps a call's key as text
//! until a store must keep it, and `scratch` is the buffer keys are
//! rendered in.

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use sha2::{Digest, Sha256};

mod builder;
mod error;
mod parse;
mod part;
mod pending;
mod scratch;

pub use builder::KeyBuilder;
pub use error::{KeyError, KeyTextProblem};
pub(crate) use part::separates;
pub use part::{KeyPart, KeyPartWriter};
pub(crate) use pending::PendingKey;

/// The longest key a payment provider accepts (Stripe's limit).
pub const PROVIDER_KEY_MAX: usize = 255;

/// How much of a long key stays readable in front of its hash in the provider form.
const PROVIDER_KEY_PREFIX: usize = PROVIDER_KEY_MAX - 2 - 64;

/// An idempotency key: the name of one action, such as `run-7:refund:1182`.
///
/// A key is built from a template's literal text and the values of its parts
/// (see [`KeyBuilder`]). Values are percent-encoded, so the encoding is
/// injective: a value that contains the separator, like `1182:refund:7`, can
/// never produce the key of another tuple. The text is stable across versions
/// and platforms: it never goes through `std::hash` or `Debug`.
///
/// Cloning a key is cheap: a key of up to 38 bytes is kept in the value
/// itself, with no allocation of its own, and a longer one is shared behind
/// a reference count.
///
/// ```
/// use idempotent_tools::{Run, call::Key};
///
/// let run = Run::new("run-7")?;
/// let key = Key::builder()
///     .part("run", &run)?
///     .literal(":refund:")?
///     .part("order_id", "1182:refund:7")?
///     .finish()?;
/// assert_eq!(key.as_str(), "run-7:refund:1182%3Arefund%3A7");
/// # Ok::<(), idempotent_tools::Error>(())
/// ```
#[derive(Clone)]
pub struct Key(Text);

/// The longest key kept inline in a [`Key`], with no allocation: a run id
/// of a dozen characters, a short literal and an order number fit. A `Key`
/// is then 40 bytes, which keeps an [`Error`](crate::Error) that carries
/// one within 128 bytes.
const INLINE_KEY_MAX: usize = 38;

/// A key's text: inline when it is short, so that a store keeps a fresh
/// call's key without allocating for it, and shared when it is long.
#[derive(Clone)]
enum Text {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_MAX],
    },
    Shared(Arc<str>),
}

impl Text {
    fn new(text: &str) -> Text {
        match u8::try_from(text.len()) {
            Ok(len) if text.len() <= INLINE_KEY_MAX => {
                let mut bytes = [0; INLINE_KEY_MAX];
                for (to, from) in bytes.iter_mut().zip(text.as_bytes()) {
                    *to = *from;
                }
                Text::Inline { len, bytes }
            }
            _ => Text::Shared(Arc::from(text)),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Text::Shared(text) => text.as_bytes(),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Copied from a `&str` whole, so always UTF-8; checked again
            // because the crate has no `unsafe` to skip the check with.
            Text::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Text::Shared(text) => text,
        }
    }
}

impl Key {
    /// Starts a key. See [`KeyBuilder`] for the rules it enforces.
    pub fn builder() -> KeyBuilder {
        KeyBuilder::new()
    }

    /// The full key text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The key's text as bytes, read with no UTF-8 check: what a map keyed
    /// by keys hashes and compares on its hot path (see the memory store).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The form to hand to a provider as its idempotency key: at most
    /// [`PROVIDER_KEY_MAX`] (255) characters.
    ///
    /// A short key is returned as it is. A longer one keeps a readable prefix
    /// and ends in `%~` and the SHA-256 of the whole key, in hex. `%~` never
    /// occurs in a short key (a `%` in a key is always followed by two hex
    /// digits), so a reduced key cannot equal a short one.
    ///
    /// ```
    /// use idempotent_tools::call::Key;
    ///
    /// let long = "x".repeat(1000);
    /// let key = Key::builder().literal("refund:")?.part("order", &long)?.finish()?;
    /// assert_eq!(key.provider_key().len(), 255);
    /// # Ok::<(), idempotent_tools::Error>(())
    /// ```
    pub fn provider_key(&self) -> Cow<'_, str> {
        let text = self.as_str();
        if text.len() <= PROVIDER_KEY_MAX {
            return Cow::Borrowed(text);
        }
        // Values are percent-encoded to ASCII, but a template's literal text
        // may hold any character but `%`, `<` and `>`: cut on a char
        // boundary. The cut never splits the `%~` marker's meaning, since a
        // short key's `%` is always followed by two hex digits.
        let mut cut = PROVIDER_KEY_PREFIX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut out = String::with_capacity(PROVIDER_KEY_MAX);
        out.push_str(&text[..cut]);
        out.push_str("%~");
        out.push_str(&hex::encode(self.digest()));
        Cow::Owned(out)
    }

    /// The SHA-256 of the key text. Durable stores index on it, so that long
    /// keys never hit an index size limit.
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// Reads a key from its text, as [`Key::as_str`] wrote it: what an
    /// operator types, or a key kept outside a store.
    ///
    /// The text must be one a template could render: at least one value
    /// (a letter, a digit, `-_.~` or an escape), no `<` or `>`, and
    /// every `%` the start of an upper-case escape of a byte that a value
    /// could not write as it is, the escapes of each value spelling UTF-8.
    /// Text outside that form would name an action no tool ever claims, or
    /// a second spelling of one that a tool does (`%41` beside `A`).
    ///
    /// ```
    /// use idempotent_tools::call::{Key, KeyError, KeyTextProblem};
    ///
    /// let key = Key::parse("run-7:refund:1182%3A7")?;
    /// assert_eq!(key.as_str(), "run-7:refund:1182%3A7");
    ///
    /// let err = Key::parse("run-7:refund:<order_id>").unwrap_err();
    /// assert!(matches!(
    ///     err,
    ///     KeyError::Unrenderable { problem: KeyTextProblem::Reserved { ch: '<', .. }, .. }
    /// ));
    /// # Ok::<(), KeyError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`KeyError::Unrenderable`], naming the first problem in the text.
    pub fn parse(text: &str) -> Result<Key, KeyError> {
        parse::check(text).map_err(|problem| KeyError::Unrenderable {
            text: text.to_owned(),
            problem,
        })?;
        Ok(Key(Text::new(text)))
    }

    /// A key from text a builder rendered and checked.
    pub(super) fn from_checked(text: &str) -> Key {
        Key(Text::new(text))
    }

    /// Rebuilds a key from text a store recorded earlier with [`Key::as_str`],
    /// unchecked: the store wrote it from a key this library rendered.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
        expect(dead_code, reason = "used by the durable stores only")
    )]
    pub(crate) fn from_recorded(text: &str) -> Key {
        Key(Text::new(text))
    }
}

// A key compares, hashes and orders as its text does, inline or shared.

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.0.as_bytes() == other.0.as_bytes()
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    /// The order of the texts: `str` orders by bytes.
    fn cmp(&self, other: &Key) -> Ordering {
        self.0.as_bytes().cmp(other.0.as_bytes())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.as_str())
    }
}

/// A key is looked up by its text: it hashes, compares and orders as its
/// text does.
impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn key(text: &str) -> Key {
        Key::parse(text).unwrap()
    }

    #[test]
    fn a_key_is_40_bytes_and_short_keys_fit_inline() {
        assert_eq!(std::mem::size_of::<Key>(), 40);
        assert!(matches!(
            key(&"k".repeat(INLINE_KEY_MAX)).0,
            Text::Inline { .. }
        ));
        assert!(matches!(
            key(&"k".repeat(INLINE_KEY_MAX + 1)).0,
            Text::Shared(_)
        ));
    }

    #[test]
    fn inline_and_shared_keys_read_compare_hash_and_order_as_their_text() {
        let texts = [
            "b".to_owned(),
            "a".repeat(300),
            format!("{}c", "a".repeat(INLINE_KEY_MAX)),
            format!("{}c", "a".repeat(INLINE_KEY_MAX - 1)),
            "a".repeat(INLINE_KEY_MAX),
            "caf%C3%A9:1".to_owned(),
        ];
        let keys: Vec<Key> = texts.iter().map(|text| key(text)).collect();
        let mut by_text = HashMap::new();
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(key.as_str(), texts[i]);
            assert_eq!(key, &key.clone());
            by_text.insert(key.clone(), i);
        }
        // Looked up by the text alone: a key hashes as its text does.
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(by_text.get(text.as_str()), Some(&i));
        }
        let mut sorted = keys.clone();
        sorted.sort();
        let mut sorted_texts = texts.to_vec();
        sorted_texts.sort();
        assert_eq!(
            sorted.iter().map(Key::as_str).collect::<Vec<_>>(),
            sorted_texts.iter().map(String::as_str).collect::<Vec<_>>()
        );
        let unicode = Key::builder()
            .literal("ŕun:")
            .and_then(|b| b.part("p", "café"))
            .and_then(KeyBuilder::finish)
            .unwrap();
        assert_eq!(unicode.as_str(), "ŕun:caf%C3%A9");
        assert_eq!(
            format!("{unicode} {unicode:?}"),
            "ŕun:caf%C3%A9 Key(\"ŕun:caf%C3%A9\")"
        );
    }
}
