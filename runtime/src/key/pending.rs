//! A call's key between rendering and the claim: kept as text in the buffer
//! it was rendered in, and made a shared [`Key`] only when a store must
//! keep it, so that a call answered from memory (a replay) allocates no key.

use super::Key;
use super::scratch;

/// A key rendered for one call, shared on demand. The default is empty: what
/// is left where a key was taken out.
#[derive(Default)]
pub(crate) struct PendingKey {
    /// The rendered text; empty once the key is shared, or when the call
    /// was given a shared key.
    rendered: String,
    shared: Option<Key>,
}

impl PendingKey {
    /// Text a builder rendered and checked.
    pub(super) fn rendered(rendered: String) -> PendingKey {
        PendingKey {
            rendered,
            shared: None,
        }
    }

    /// The key's text.
    pub(crate) fn as_str(&self) -> &str {
        match &self.shared {
            Some(key) => key.as_str(),
            None => &self.rendered,
        }
    }

    /// The key as a shared value, allocated the first time it is asked for.
    pub(crate) fn share(&mut self) -> &Key {
        let PendingKey { rendered, shared } = self;
        shared.get_or_insert_with(|| Key::from_checked(rendered))
    }

    /// The key as a shared value.
    pub(crate) fn into_key(mut self) -> Key {
        self.share().clone()
    }
}

impl From<Key> for PendingKey {
    fn from(key: Key) -> PendingKey {
        PendingKey {
            rendered: String::new(),
            shared: Some(key),
        }
    }
}

impl Drop for PendingKey {
    fn drop(&mut self) {
        // The buffer goes back for the next key rendered on this thread.
        scratch::give_back(std::mem::take(&mut self.rendered));
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
