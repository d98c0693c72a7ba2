//! Rendering a key from a template's literals and parts.

use super::part::{KeyPart, KeyPartWriter, separates};
use super::pending::PendingKey;
use super::scratch;
use super::{Key, KeyError};
use crate::run::Run;

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
    pub(super) fn new() -> KeyBuilder {
        let buf = scratch::take();
        KeyBuilder {
            buf,
            parts: 0,
            open_part: false,
        }
    }

    /// Appends literal template text, such as `:refund:`.
    pub fn literal(mut self, text: &str) -> Result<KeyBuilder, KeyError> {
        if let Some(ch) = text.chars().find(|c| matches!(c, '%' | '<' | '>')) {
            return Err(KeyError::ReservedChar {
                literal: text.to_owned(),
                ch,
            });
        }
        if self.open_part && !text.is_empty() {
            if separates(text) {
                self.open_part = false;
            } else {
                return Err(KeyError::NoSeparator {
                    literal: text.to_owned(),
                });
            }
        }
        self.buf.push_str(text);
        Ok(self)
    }

    /// Appends literal text the attribute has already checked against the
    /// rules [`literal`](KeyBuilder::literal) enforces, while the crate
    /// compiled: no reserved character, and a separator after a part.
    pub(crate) fn push_proven_literal(&mut self, text: &'static str) {
        if !text.is_empty() {
            self.open_part = false;
        }
        self.buf.push_str(text);
    }

    /// Appends a part: a value's escaped text. `name` says which part failed
    /// when it is empty or misplaced.
    pub fn part<P: KeyPart + ?Sized>(
        mut self,
        name: &'static str,
        value: &P,
    ) -> Result<KeyBuilder, KeyError> {
        self.push_part(name, value)?;
        Ok(self)
    }

    /// [`KeyBuilder::part`] in place, as the attribute's expansion builds a
    /// key: the builder is not moved at every step.
    pub(crate) fn push_part<P: KeyPart + ?Sized>(
        &mut self,
        name: &'static str,
        value: &P,
    ) -> Result<(), KeyError> {
        if self.open_part {
            return Err(KeyError::AdjacentParts { part: name });
        }
        let before = self.buf.len();
        value.write_key_part(&mut KeyPartWriter::new(&mut self.buf));
        if self.buf.len() == before {
            return Err(KeyError::EmptyPart { part: name });
        }
        self.parts += 1;
        self.open_part = true;
        Ok(())
    }

    /// Appends the run in scope (see [`Run::scope`](crate::Run::scope)).
    ///
    /// Fails with [`KeyError::NoRun`] outside a run scope: a key without
    /// its run would merge the same action from different runs.
    pub fn run(mut self) -> Result<KeyBuilder, KeyError> {
        self.push_run()?;
        Ok(self)
    }

    /// [`KeyBuilder::run`] in place.
    pub(crate) fn push_run(&mut self) -> Result<(), KeyError> {
        match Run::current() {
            Some(run) => self.push_part("run", &run),
            None => Err(KeyError::NoRun),
        }
    }

    /// Finishes the key.
    pub fn finish(self) -> Result<Key, KeyError> {
        if self.parts == 0 {
            return Err(KeyError::NoParts);
        }
        Ok(Key::from_checked(&self.buf))
    }

    /// Finishes the key as text, in the buffer it was rendered in: the key
    /// of a guarded call, allocated only if a store must keep it.
    pub(crate) fn finish_pending(mut self) -> Result<PendingKey, KeyError> {
        if self.parts == 0 {
            return Err(KeyError::NoParts);
        }
        Ok(PendingKey::rendered(std::mem::take(&mut self.buf)))
    }
}

impl Drop for KeyBuilder {
    fn drop(&mut self) {
        scratch::give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PROVIDER_KEY_MAX;

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
            Some(KeyError::EmptyPart { part: "order_id" })
        ));
    }

    #[test]
    fn adjacent_parts_and_bare_literals_are_refused() {
        let b = Key::builder().part("a", "1").unwrap();
        assert!(matches!(
            b.part("b", "2").err(),
            Some(KeyError::AdjacentParts { part: "b" })
        ));
        let b = Key::builder().part("a", "1").unwrap();
        assert!(matches!(
            b.literal("x").err(),
            Some(KeyError::NoSeparator { .. })
        ));
    }

    #[test]
    fn a_proven_literal_renders_and_separates_as_a_checked_one() {
        let checked = Key::builder()
            .part("a", "1")
            .and_then(|b| b.literal(":refund:"))
            .and_then(|b| b.part("b", "2"))
            .and_then(KeyBuilder::finish)
            .unwrap();
        let mut proven = Key::builder();
        proven.push_part("a", "1").unwrap();
        proven.push_proven_literal(":refund:");
        proven.push_part("b", "2").unwrap();
        let proven = proven.finish().unwrap();
        assert_eq!(proven, checked);
    }

    #[test]
    fn a_key_without_parts_is_refused() {
        let b = Key::builder().literal("refund").unwrap();
        assert!(matches!(b.finish(), Err(KeyError::NoParts)));
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
