//! The values a key is made of, and how their text is escaped.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use super::Key;
use crate::run::Run;

/// A value that may be part of an idempotency key.
///
/// Implemented for integers, `bool`, `char`, strings, [`Run`](crate::Run), and
/// references and smart pointers to those. A newtype opts in with
/// `#[derive(KeyPart)]` or by hand:
///
/// ```
/// use idempotent_tools::{KeyPart, call::KeyPartWriter};
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
    pub(super) fn new(out: &mut String) -> KeyPartWriter<'_> {
        KeyPartWriter { out }
    }

    /// Appends text to the part, escaping it.
    pub fn write_str(&mut self, text: &str) {
        // Most parts (ids, numbers, runs) need no escape: copy them whole.
        match text.bytes().position(|b| !is_unreserved(b)) {
            None => self.out.push_str(text),
            Some(first) => self.write_escaped(text, first),
        }
    }

    /// Appends text that holds only unreserved bytes, as it is: the digits
    /// and sign of an integer.
    fn write_unreserved(&mut self, text: &str) {
        debug_assert!(text.bytes().all(is_unreserved), "{text:?}");
        self.out.push_str(text);
    }

    /// Appends `text`, whose first byte to escape is at `first`.
    fn write_escaped(&mut self, text: &str, first: usize) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let (plain, mut rest) = text.split_at(first);
        self.out.push_str(plain);
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

/// Whether a value writes this byte as it is: ASCII letters and digits and
/// `-_.~`, RFC 3986's unreserved characters. Every other byte is escaped.
pub(super) fn is_unreserved(b: u8) -> bool {
    UNRESERVED[usize::from(b)]
}

/// [`is_unreserved`] for every byte, looked up rather than computed: the
/// check runs on every byte of every key.
static UNRESERVED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~');
        b += 1;
    }
    table
};

/// Whether literal text separates the parts around it: it holds a byte no
/// value writes unescaped, so no value can imitate it. The macro's template
/// rule (`template::is_separator`) is the same, per character.
pub(crate) fn separates(text: &str) -> bool {
    text.bytes().any(|b| !is_unreserved(b))
}

macro_rules! key_part_by_digits {
    ($($t:ty),* $(,)?) => {$(
        impl KeyPart for $t {
            fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
                // The same text as `Display`, which the language fixes for
                // integers: digits and a `-`, none of them escaped.
                out.write_unreserved(itoa::Buffer::new().format(*self));
            }
        }
    )*};
}

key_part_by_digits!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize,
);

impl KeyPart for bool {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        out.write_unreserved(if *self { "true" } else { "false" });
    }
}

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

impl KeyPart for Run {
    fn write_key_part(&self, out: &mut KeyPartWriter<'_>) {
        out.write_str(self.as_str())
    }
}
