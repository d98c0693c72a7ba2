//! Which keys are acting on this task: for `current_key`, and to refuse a
//! key used again inside its own action.

use std::sync::Arc;

use crate::key::Key;

tokio::task_local! {
    static ACTIVE: Active;
}

/// The keys whose actions are running on this task, innermost first.
#[derive(Clone)]
pub(crate) struct Active {
    key: Key,
    outer: Option<Arc<[Key]>>,
}

impl Active {
    /// `key`'s action, inside whatever actions run on this task now.
    pub(crate) fn inside(key: Key) -> Active {
        let outer = ACTIVE
            .try_with(|active| {
                let mut keys = Vec::with_capacity(1 + active.outer.as_ref().map_or(0, |o| o.len()));
                keys.push(active.key.clone());
                keys.extend(active.outer.iter().flat_map(|o| o.iter().cloned()));
                Arc::from(keys)
            })
            .ok();
        Active { key, outer }
    }

    /// Runs one poll of the action as this key's: `current_key` reads the
    /// key inside it.
    pub(crate) fn poll_as<R>(&self, poll: impl FnOnce() -> R) -> R {
        ACTIVE.sync_scope(self.clone(), poll)
    }

    /// The key acted as.
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    fn holds(&self, key: &str) -> bool {
        self.key.as_str() == key
            || self
                .outer
                .iter()
                .flat_map(|o| o.iter())
                .any(|k| k.as_str() == key)
    }
}

/// Whether `key`'s action is running on this task, so that claiming it again
/// here would wait on itself.
pub(crate) fn is_acting(key: &str) -> bool {
    ACTIVE.try_with(|active| active.holds(key)).unwrap_or(false)
}

/// The key of the guarded action running on this task, if any.
///
/// Hand its [`Key::provider_key`] to the provider as the provider's own
/// idempotency key, so that a retry after a crash is deduplicated there too.
///
/// Re-entrancy is detected per task: an action that spawns a task which
/// calls the same tool with the same key and waits for it would wait on
/// itself until the wait deadline, then fail with
/// [`Error::InProgress`](crate::Error::InProgress). Call it on the same task
/// instead (it then fails at once with
/// [`Error::Reentrant`](crate::Error::Reentrant)).
///
/// ```
/// # use idempotent_tools::{call::{Call, Key}, current_key};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::Error> {
/// let key = Key::builder().literal("run-1:refund:")?.part("order_id", &1182)?.finish()?;
/// let outcome = Call::new("shop::refund", key)
///     .run(async {
///         let key = current_key().ok_or(idempotent_tools::Error::MissingRun)?;
///         Ok::<_, idempotent_tools::Error>(key.provider_key().into_owned())
///     })
///     .await?;
/// assert_eq!(outcome.value().map(String::as_str), Some("run-1:refund:1182"));
/// # Ok(()) }
/// ```
pub fn current_key() -> Option<Key> {
    ACTIVE.try_with(|active| active.key.clone()).ok()
}
