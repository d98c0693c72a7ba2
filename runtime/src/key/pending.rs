//! A call's key between rendering and the claim: kept as text in the buffer
//! it was rendered in, and made a shared [`Key`] only when a store must
//! keep it, so that a call answered from memory (a replay) allocates no key.

use super::Key;
use super::scratch;

/// A key rendered for one call, shared on demand. The default is empty: what
/// is left where a key was taken out.
///
/// One of the two at a time, so that a call, which carries it, stays small
/// enough to be moved with a few stores rather than a copy.
pub(crate) enum PendingKey {
    /// The rendered text, in the buffer it was rendered in.
    Rendered(String),
    /// The key shared, or the call was given a shared key.
    Shared(Key),
}

impl Default for PendingKey {
    fn default() -> PendingKey {
        PendingKey::Rendered(String::new())
    }
}

/// What [`PendingKey::share`] reads if a key it has just shared were not
/// there: never read.
static UNSHARED: Key = Key(super::Text::Inline {
    len: 0,
    bytes: [0; super::INLINE_KEY_MAX],
});

impl PendingKey {
    /// Text a builder rendered and checked.
    pub(super) fn rendered(rendered: String) -> PendingKey {
        PendingKey::Rendered(rendered)
    }

    /// The key's text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            PendingKey::Rendered(rendered) => rendered,
            PendingKey::Shared(key) => key.as_str(),
        }
    }

    /// The key as a shared value, allocated the first time it is asked for;
    /// the buffer goes back for the next key rendered on this thread.
    pub(crate) fn share(&mut self) -> &Key {
        if let PendingKey::Rendered(rendered) = self {
            let key = Key::from_checked(rendered);
            scratch::give_back(std::mem::take(rendered));
            *self = PendingKey::Shared(key);
        }
        match self {
            PendingKey::Shared(key) => key,
            // Shared just above.
            PendingKey::Rendered(_) => &UNSHARED,
        }
    }

    /// The key as a shared value.
    pub(crate) fn into_key(mut self) -> Key {
        self.share().clone()
    }
}

impl From<Key> for PendingKey {
    fn from(key: Key) -> PendingKey {
        PendingKey::Shared(key)
    }
}

impl Drop for PendingKey {
    fn drop(&mut self) {
        // The buffer goes back for the next key rendered on this thread.
        if let PendingKey::Rendered(rendered) = self {
            scratch::give_back(std::mem::take(rendered));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_key_reads_and_shares_as_the_key_it_renders() {
        let build = || {
            Key::builder()
                .literal("run-1:refund:")
                .and_then(|b| b.part("order_id", &1182_u64))
        };
        let key = build().and_then(super::super::KeyBuilder::finish).unwrap();
        let mut pending = build()
            .and_then(super::super::KeyBuilder::finish_pending)
            .unwrap();
        assert_eq!(pending.as_str(), key.as_str());
        assert_eq!(pending.share(), &key);
        assert_eq!(pending.as_str(), key.as_str());
        assert_eq!(pending.into_key(), key);
        assert_eq!(PendingKey::from(key.clone()).as_str(), key.as_str());
    }
}
