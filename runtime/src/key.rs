//! Idempotency keys: what an action is, rendered so that two asks for the same
//! thing give the same key and two different things never do.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::run::Run;

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
/// use idempotent_tools::{Key, Run};
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
    /// use idempotent_tools::Key;
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

    /// Rebuilds a key from text a store recorded earlier with [`Key::as_str`].
    ///
    /// No escaping is applied: the text is trusted to be a key this library
    /// rendered. Use [`Key::builder`] for anything else.
    pub fn from_recorded(text: &str) -> Key {
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

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Why a key could not be built. Each variant names the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A part rendered as empty text. An empty value would merge with its
    /// neighbours (`run::refund:`), so two different asks could share a key.
    #[error(
        "key part `{part}` is empty; an empty value would make `a::b` keys that different asks share. \
         Check the value before the call, or key on a field that is always set"
    )]
    EmptyPart {
        /// The name of the part.
        part: &'static str,
    },
    /// Two parts with no separating literal between them: `<a><b>` cannot
    /// tell `("1", "23")` from `("12", "3")`.
    #[error(
        "key part `{part}` follows another part with no separator; `<a><b>` keys are ambiguous. \
         Put a literal such as `:` between them"
    )]
    AdjacentParts {
        /// The name of the second part.
        part: &'static str,
    },
    /// A literal between two parts has no separator character, so a value
    /// could imitate it.
    #[error(
        "literal `{literal}` between two key parts has no separator character \
         (anything other than letters, digits, `-`, `_`, `.` and `~`), so a value could imitate it. \
         Add one, as in `:refund:`"
    )]
    NoSeparator {
        /// The offending literal.
        literal: String,
    },
    /// A literal contains a character reserved by the key syntax.
    #[error(
        "literal `{literal}` contains `{ch}`, which keys reserve (`%` escapes values, `<` and `>` mark parts)"
    )]
    ReservedChar {
        /// The offending literal.
        literal: String,
        /// The reserved character.
        ch: char,
    },
    /// A key with no part at all would make every call the same action.
    #[error(
        "a key needs at least one part; a key of fixed text makes every call one action. \
         Key on the run and the object acted on, as in `<run>:refund:<order_id>`"
    )]
    NoParts,
}

/// A value that may be part of an idempotency key.
///
/// Implemented for integers, `bool`, `char`, strings, [`Run`], and
/// references and smart pointers to those. A newtype opts in with
/// `#[derive(KeyPart)]` or by hand:
///
/// ```
/// use idempotent_tools::{KeyPart, KeyPartWriter};
///
/// struct OrderId(u64);
///
/// impl KeyPart for OrderId {
///     fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
///         self.0.write_key_part(out)
///     }
/// }
/// ```
///
/// Floats are refused: `0.1 + 0.2` and `0.3` print differently, `-0.0` and
/// `0.0` compare equal, and NaN has many encodings, so a float would split
/// one ask into several keys. Key on integer minor units (cents) instead.
///
/// [`FreeText`](crate::FreeText) never implements it: text the model words
/// freely changes between asks.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of an idempotency key",
    label = "this value is not a `KeyPart`",
    note = "a key must name the action the same way every time it is asked for",
    note = "model-authored free text (`FreeText<_>`, a reason or a note) is worded differently on each ask, so two identical asks would get two keys; key on ids instead, such as the run and the order id",
    note = "floats are refused because one amount can print several ways; key on integer minor units such as cents",
    note = "for your own id type, `#[derive(KeyPart)]` or implement `idempotent_tools::KeyPart`"
)]
pub trait KeyPart {
    /// Writes this value's canonical text. The writer escapes it.
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>);
}

/// Receives a [`KeyPart`]'s text and percent-encodes it into the key.
///
/// Everything but ASCII letters, digits and `-_.~` is written as `%XX`
/// (UTF-8 bytes, upper-case hex), as in RFC 3986.
pub struct KeyPartWriter<'a> {
    out: &'a mut String,
}

impl KeyPartWriter<'_> {
    /// Appends text to the part, escaping it.
    pub fn write_str(&mut self, text: &str) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut rest = text;
        while !rest.is_empty() {
            // Copy the longest run of unreserved bytes at once. They are
            // ASCII, so the run ends on a char boundary.
            let run = rest.bytes().take_while(|&b| is_unreserved(b)).count();
            let (plain, tail) = rest.split_at(run);
            self.out.push_str(plain);
            let Some((&b, _)) = tail.as_bytes().split_first() else {
                break;
            };
            self.out.push('%');
            self.out.push(HEX[usize::from(b >> 4)] as char);
            self.out.push(HEX[usize::from(b & 0xF)] as char);
            // Escape the rest of this character's bytes with it, so the
            // remainder starts on a char boundary again.
            let width = tail.chars().next().map_or(1, char::len_utf8);
            for &b in &tail.as_bytes()[1..width] {
                self.out.push('%');
                self.out.push(HEX[usize::from(b >> 4)] as char);
                self.out.push(HEX[usize::from(b & 0xF)] as char);
            }
            rest = &tail[width..];
        }
    }
}

impl fmt::Write for KeyPartWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        KeyPartWriter::write_str(self, s);
        Ok(())
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

macro_rules! key_part_by_display {
    ($($t:ty),* $(,)?) => {$(
        impl KeyPart for $t {
            fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
                // Integer and bool `Display` output is fixed by the language.
                let _ = fmt::Write::write_fmt(out, format_args!("{self}"));
            }
        }
    )*};
}

key_part_by_display!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, bool,
);

macro_rules! key_part_by_nonzero {
    ($($t:ty),* $(,)?) => {$(
        impl KeyPart for $t {
            fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
                self.get().write_key_part(out)
            }
        }
    )*};
}

key_part_by_nonzero!(
    std::num::NonZeroU8,
    std::num::NonZeroU16,
    std::num::NonZeroU32,
    std::num::NonZeroU64,
    std::num::NonZeroU128,
    std::num::NonZeroUsize,
    std::num::NonZeroI8,
    std::num::NonZeroI16,
    std::num::NonZeroI32,
    std::num::NonZeroI64,
    std::num::NonZeroI128,
    std::num::NonZeroIsize,
);

impl KeyPart for char {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        out.write_str(self.encode_utf8(&mut [0; 4]))
    }
}

impl KeyPart for str {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        out.write_str(self)
    }
}

impl KeyPart for String {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        out.write_str(self)
    }
}

impl KeyPart for Cow<'_, str> {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        out.write_str(self)
    }
}

impl<T: KeyPart + ?Sized> KeyPart for &T {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        (**self).write_key_part(out)
    }
}

impl<T: KeyPart + ?Sized> KeyPart for &mut T {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        (**self).write_key_part(out)
    }
}

impl<T: KeyPart + ?Sized> KeyPart for Box<T> {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        (**self).write_key_part(out)
    }
}

impl<T: KeyPart + ?Sized> KeyPart for Arc<T> {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        (**self).write_key_part(out)
    }
}

impl<T: KeyPart + ?Sized> KeyPart for std::rc::Rc<T> {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        (**self).write_key_part(out)
    }
}

impl KeyPart for Key {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        out.write_str(self.as_str())
    }
}

thread_local! {
    // Keys are rendered into a reused buffer and copied once into their
    // final allocation, so building a key costs one allocation.
    static SCRATCH: Cell<String> = const { Cell::new(String::new()) };
}

/// Builds a [`Key`] from literal text and parts, and enforces the rules that
/// keep keys injective:
///
/// - every part renders non-empty;
/// - two parts are separated by a literal holding at least one separator
///   character (anything but ASCII letters, digits and `-_.~`);
/// - literals contain no `%`, `<` or `>`;
/// - there is at least one part.
///
/// `#[idempotent(key = "...")]` checks the same rules at compile time and
/// expands into this builder.
pub struct KeyBuilder {
    buf: String,
    parts: usize,
    // The last thing written was a part, and no literal with a separator has
    // followed it yet.
    open_part: bool,
}

impl KeyBuilder {
    fn new() -> KeyBuilder {
        let mut buf = SCRATCH.with(Cell::take);
        buf.clear();
        KeyBuilder {
            buf,
            parts: 0,
            open_part: false,
        }
    }

    /// Appends literal template text, such as `:refund:`.
    pub fn literal(mut self, text: &str) -> Result<KeyBuilder, Error> {
        if let Some(ch) = text.chars().find(|c| matches!(c, '%' | '<' | '>')) {
            return Err(KeyError::ReservedChar {
                literal: text.to_owned(),
                ch,
            }
            .into());
        }
        if self.open_part && !text.is_empty() {
            if text.bytes().any(|b| !is_unreserved(b)) {
                self.open_part = false;
            } else {
                return Err(KeyError::NoSeparator {
                    literal: text.to_owned(),
                }
                .into());
            }
        }
        self.buf.push_str(text);
        Ok(self)
    }

    /// Appends a part: a value's escaped text. `name` says which part failed
    /// when it is empty or misplaced.
    pub fn part<P: KeyPart + ?Sized>(
        mut self,
        name: &'static str,
        value: &P,
    ) -> Result<KeyBuilder, Error> {
        if self.open_part {
            return Err(KeyError::AdjacentParts { part: name }.into());
        }
        let before = self.buf.len();
        value.write_key_part(&mut KeyPartWriter { out: &mut self.buf });
        if self.buf.len() == before {
            return Err(KeyError::EmptyPart { part: name }.into());
        }
        self.parts += 1;
        self.open_part = true;
        Ok(self)
    }

    /// Appends the run in scope (see [`Run::scope`](crate::Run::scope)).
    ///
    /// Fails with [`Error::MissingRun`] outside a run scope: a key without
    /// its run would merge the same action from different runs.
    pub fn run(self) -> Result<KeyBuilder, Error> {
        match Run::current() {
            Some(run) => self.part("run", &run),
            None => Err(Error::MissingRun),
        }
    }

    /// Finishes the key.
    pub fn finish(self) -> Result<Key, Error> {
        if self.parts == 0 {
            return Err(KeyError::NoParts.into());
        }
        Ok(Key(Arc::from(self.buf.as_str())))
    }
}

impl Drop for KeyBuilder {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // Keep a modest buffer for the next key; drop huge ones.
        if buf.capacity() <= 4096 {
            SCRATCH.with(|cell| cell.set(buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: &[&str]) -> Key {
        let mut b = Key::builder().literal("run:").unwrap();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                b = b.literal(":").unwrap();
            }
            b = b.part("p", *p).unwrap();
        }
        b.finish().unwrap()
    }

    #[test]
    fn separator_inside_a_value_cannot_imitate_another_tuple() {
        assert_ne!(key(&["1182:refund", "7"]), key(&["1182", "refund:7"]));
        assert_eq!(key(&["1182:refund", "7"]).as_str(), "run:1182%3Arefund:7");
    }

    #[test]
    fn unicode_is_percent_encoded_as_utf8() {
        assert_eq!(key(&["café"]).as_str(), "run:caf%C3%A9");
    }

    #[test]
    fn empty_value_is_refused() {
        let err = Key::builder().part("order_id", "").err();
        assert!(matches!(
            err,
            Some(Error::Key(KeyError::EmptyPart { part: "order_id" }))
        ));
    }

    #[test]
    fn adjacent_parts_and_bare_literals_are_refused() {
        let b = Key::builder().part("a", "1").unwrap();
        assert!(matches!(
            b.part("b", "2").err(),
            Some(Error::Key(KeyError::AdjacentParts { part: "b" }))
        ));
        let b = Key::builder().part("a", "1").unwrap();
        assert!(matches!(
            b.literal("x").err(),
            Some(Error::Key(KeyError::NoSeparator { .. }))
        ));
    }

    #[test]
    fn a_key_without_parts_is_refused() {
        let b = Key::builder().literal("refund").unwrap();
        assert!(matches!(b.finish(), Err(Error::Key(KeyError::NoParts))));
    }

    #[test]
    fn provider_key_is_bounded_and_distinct() {
        let a = key(&[&"a".repeat(400)]);
        let b = key(&[&format!("{}b", "a".repeat(399))]);
        assert_eq!(a.provider_key().len(), PROVIDER_KEY_MAX);
        assert_ne!(a.provider_key(), b.provider_key());
        let short = key(&["1182"]);
        assert_eq!(short.provider_key(), "run:1182");
    }
}
