//! Idempotency keys: what an action is, rendered so that two asks for the same
//! thing give the same key and two different things never do.
//!
//! `builder` renders a key from a template's literals and parts, `part`
//! escapes each value, `parse` reads a key back from its text, and `error`
//! says why a key could not be had.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

mod builder;
mod error;
mod parse;
mod part;
mod pending;

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
/// Cloning a key is cheap (a reference count).
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
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Arc<str>);

impl Key {
    /// Starts a key. See [`KeyBuilder`] for the rules it enforces.
    pub fn builder() -> KeyBuilder {
        KeyBuilder::new()
    }

    /// The full key text.
    pub fn as_str(&self) -> &str {
        &self.0
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
        if self.0.len() <= PROVIDER_KEY_MAX {
            return Cow::Borrowed(&self.0);
        }
        // Values are percent-encoded to ASCII, but a template's literal text
        // may hold any character but `%`, `<` and `>`: cut on a char
        // boundary. The cut never splits the `%~` marker's meaning, since a
        // short key's `%` is always followed by two hex digits.
        let mut cut = PROVIDER_KEY_PREFIX;
        while !self.0.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut out = String::with_capacity(PROVIDER_KEY_MAX);
        out.push_str(&self.0[..cut]);
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
        Ok(Key(Arc::from(text)))
    }

    /// A key from text a builder rendered and checked.
    pub(super) fn from_checked(text: &str) -> Key {
        Key(Arc::from(text))
    }

    /// Rebuilds a key from text a store recorded earlier with [`Key::as_str`],
    /// unchecked: the store wrote it from a key this library rendered.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
        expect(dead_code, reason = "used by the durable stores only")
    )]
    pub(crate) fn from_recorded(text: &str) -> Key {
        Key(Arc::from(text))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", &*self.0)
    }
}

/// A key is looked up by its text: it hashes, compares and orders as its
/// text does.
impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}
