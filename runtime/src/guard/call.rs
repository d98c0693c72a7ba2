//! [`Call`]: one guarded call, as a user builds it.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::verify::Verifier;
use crate::failure::Verified;
use crate::fingerprint::Fingerprint;
use crate::key::{Key, PendingKey};
use crate::policy::{Policy, Takeover};
use crate::store::{IntoStore, Store};
use crate::tool::ToolId;

/// One guarded call: a key, the tool, the arguments' fingerprint and the
/// call site's policy. [`Call::run`] claims the key, then acts or replays.
///
/// This is what `#[idempotent]` expands into; use it by hand when keys are
/// built at run time:
///
/// ```
/// use std::sync::Arc;
/// use idempotent_tools::{MemoryStore, Outcome, Run};
/// use idempotent_tools::call::{Call, Fingerprint, FingerprintError, Key, KeyError};
///
/// #[derive(Debug, thiserror::Error)]
/// enum PayError {
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_tools::Error),
///     #[error(transparent)]
///     Key(#[from] KeyError),
///     #[error(transparent)]
///     Fingerprint(#[from] FingerprintError),
/// }
///
/// async fn refund(run: &Run, order_id: &str, usd: u64) -> Result<Outcome<String>, PayError> {
///     let key = Key::builder()
///         .part("run", run)?
///         .literal(":refund:")?
///         .part("order_id", order_id)?
///         .finish()?;
///     let fingerprint = Fingerprint::builder().arg("usd", &usd)?.finish();
///     Call::new("shop::refund", key)
///         .fingerprint(fingerprint)
///         .run(async move { Ok(format!("refunded {usd} on {order_id}")) })
///         .await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let run = Run::new("run-1")?;
/// assert!(refund(&run, "1182", 42).await?.is_fresh());
/// assert!(refund(&run, "1182", 42).await?.is_replay());
/// assert!(refund(&run, "1182", 41).await?.is_conflict());
/// # Ok(()) }
/// ```
#[must_use = "a call does nothing until `.run(..)` is awaited"]
pub struct Call {
    pub(super) key: PendingKey,
    pub(super) tool: ToolId,
    pub(super) fingerprint: Fingerprint,
    pub(super) policy: CallPolicy,
    pub(super) store: Option<Arc<dyn Store>>,
    /// How to ask the provider whether the action happened, if it can be.
    pub(super) verifier: Option<Verifier>,
}

impl Call {
    /// A call of `tool` under `key`, with the default policy and store.
    pub fn new(tool: impl Into<ToolId>, key: Key) -> Call {
        Call::pending(tool.into(), PendingKey::from(key))
    }

    /// A call under a key still in the buffer it was rendered in, as the
    /// attribute builds it.
    pub(crate) fn pending(tool: ToolId, key: PendingKey) -> Call {
        Call {
            key,
            tool,
            fingerprint: Fingerprint::EMPTY,
            policy: CallPolicy::fixed(&Policy::DEFAULT),
            store: None,
            verifier: None,
        }
    }

    /// A call as the attribute prepares it, whole, so that it is built in
    /// place rather than through a chain of setters.
    pub(crate) fn prepared(
        tool: ToolId,
        key: PendingKey,
        fingerprint: Fingerprint,
        policy: &'static Policy,
        store: Option<Arc<dyn Store>>,
    ) -> Call {
        Call {
            key,
            tool,
            fingerprint,
            policy: CallPolicy::fixed(policy),
            store,
            verifier: None,
        }
    }

    /// Names the call's tool anew: a free function's identity, once the
    /// functions it is nested in are read.
    pub(crate) fn set_tool(&mut self, tool: ToolId) {
        self.tool = tool;
    }

    /// The arguments beyond the key. A different fingerprint under the same
    /// key is a conflict.
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Call {
        self.fingerprint = fingerprint;
        self
    }

    /// Uses this store instead of the process default.
    pub fn store(mut self, store: impl IntoStore) -> Call {
        self.store = Some(store.into_store());
        self
    }

    /// Replaces the whole policy: one [`Policy`] value shared by several
    /// tools, say. Setters called after it change only their own field.
    ///
    /// ```
    /// use std::time::Duration;
    /// use std::sync::Arc;
    /// use idempotent_tools::{MemoryStore, Run, call::{Call, Key, Policy}};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idempotent_tools::Error> {
    /// let shop = Policy {
    ///     replay_note: Some("Already refunded: tell the customer it is done.".into()),
    ///     retention: Duration::from_secs(7 * 24 * 3600),
    ///     ..Policy::default()
    /// };
    /// let store = Arc::new(MemoryStore::new());
    /// let run = Run::new("run-1")?;
    /// let refund = || -> Result<Call, idempotent_tools::Error> {
    ///     let key = Key::builder()
    ///         .part("run", &run)?
    ///         .literal(":refund:")?
    ///         .part("order_id", "A1")?
    ///         .finish()?;
    ///     Ok(Call::new("shop::refund", key).policy(shop.clone()).store(store.clone()))
    /// };
    /// refund()?.run(async { Ok::<_, idempotent_tools::Error>(42) }).await?;
    /// let again = refund()?.run(async { Ok::<_, idempotent_tools::Error>(42) }).await?;
    /// assert_eq!(again.note(), Some("Already refunded: tell the customer it is done."));
    /// # Ok(())
    /// # }
    /// ```
    pub fn policy(mut self, policy: Policy) -> Call {
        self.policy = CallPolicy::built(policy);
        self
    }

    /// Uses a policy fixed for the life of the program, such as a
    /// `static`, without copying it into the call: what `#[idempotent]`
    /// does with a call site's options. Setters called after it change a
    /// copy, and only their own field.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools::call::{Call, Key, Policy};
    ///
    /// static SHOP: Policy = Policy {
    ///     wait: Duration::from_secs(60),
    ///     ..Policy::DEFAULT
    /// };
    /// # fn main() -> Result<(), idempotent_tools::Error> {
    /// let key = Key::builder().literal("run-1:refund:")?.part("order_id", "A1")?.finish()?;
    /// let call = Call::new("shop::refund", key).static_policy(&SHOP);
    /// # let _ = call;
    /// # Ok(()) }
    /// ```
    pub fn static_policy(mut self, policy: &'static Policy) -> Call {
        self.policy = CallPolicy::fixed(policy);
        self
    }

    /// How long the record is kept once finished.
    ///
    /// This setter and the five after it change the call's own copy of its
    /// policy, made (in a box) the first time one is used. Calls that share
    /// settings allocate nothing for them with [`Call::static_policy`].
    pub fn retention(mut self, retention: Duration) -> Call {
        self.policy.make_mut().retention = retention;
        self
    }

    /// How long a duplicate waits for an in-flight call.
    pub fn wait(mut self, wait: Duration) -> Call {
        self.policy.make_mut().wait = wait;
        self
    }

    /// The claim's lease.
    pub fn lease(mut self, lease: Duration) -> Call {
        self.policy.make_mut().lease = lease;
        self
    }

    /// What a takeover from a crashed holder does.
    pub fn takeover(mut self, takeover: Takeover) -> Call {
        self.policy.make_mut().takeover = takeover;
        self
    }

    /// How to ask the provider whether the action under the call's key
    /// happened, for a provider that takes no idempotency key but can be
    /// asked (a refund listed by order, a ticket found by a tag). It runs
    /// when the action fails in a way that may have taken effect (see
    /// [`Call::run_classified`]) and, with [`Takeover::Verify`] (which
    /// this sets), when the call takes over from a holder that stopped
    /// mid-action. Its answer decides: [`Verified::Applied`] is recorded
    /// as the action's result and replayed; [`Verified::NotApplied`] lets
    /// the action run (once the policy's `settle` time has passed);
    /// [`Verified::NotYet`], a panic or no answer is asked again until the
    /// call's `wait` runs out, and then, as for
    /// [`Verified::Contradicts`], the outcome is recorded as unknown for an
    /// operator to resolve. A call dropped (or panicking) once its action
    /// may have taken effect, or while it asks, does not release its
    /// claim: the asking goes on, on a task of the guard's own, and calls
    /// waiting on the key get what it finds.
    ///
    /// ```
    /// use idempotent_tools::call::{Call, Key};
    /// use idempotent_tools::{Classify, Failure, Verified};
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// enum RefundError {
    ///     #[error("the payment service did not answer in time")]
    ///     TimedOut,
    ///     #[error(transparent)]
    ///     Idempotency(#[from] idempotent_tools::Error),
    /// }
    ///
    /// impl Classify for RefundError {
    ///     fn failure(&self) -> Failure {
    ///         match self {
    ///             RefundError::TimedOut => Failure::Unknown,
    ///             RefundError::Idempotency(_) => Failure::Definite,
    ///         }
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let key = Key::builder().literal("run-1:refund:")?.part("order_id", "1182")?.finish()?;
    /// // The refund went through, but its answer never came back.
    /// let refunded = Call::new("shop::refund", key)
    ///     .verify(|_key| async { Verified::Applied("re_1".to_owned()) })
    ///     .run_classified(async { Err::<String, _>(RefundError::TimedOut) })
    ///     .await?;
    /// assert_eq!(refunded.value().map(String::as_str), Some("re_1"));
    /// # Ok(()) }
    /// ```
    pub fn verify<T, F, Fut>(mut self, check: F) -> Call
    where
        F: Fn(Key) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Verified<T>> + Send + 'static,
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        self.verifier = Some(Verifier::new(check));
        self.takeover(Takeover::Verify)
    }

    /// The call with `verifier` as its verification, its policy untouched:
    /// the attribute's `static` policy already says how a takeover goes.
    pub(crate) fn with_verifier(mut self, verifier: Verifier) -> Call {
        self.verifier = Some(verifier);
        self
    }

    /// How long the provider's lookups may lag behind its writes (see
    /// [`Policy::settle`]).
    pub fn settle(mut self, settle: Duration) -> Call {
        self.policy.make_mut().settle = settle;
        self
    }

    /// The note a replay carries for the model.
    pub fn replay_note(mut self, note: impl Into<Cow<'static, str>>) -> Call {
        self.policy.make_mut().replay_note = Some(note.into());
        self
    }

    /// The note a conflict on arguments carries for the model.
    pub fn conflict_note(mut self, note: impl Into<Cow<'static, str>>) -> Call {
        self.policy.make_mut().conflict_note = Some(note.into());
        self
    }

    /// The key's text.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }
}

/// A call's policy: fixed for the program's life (the attribute's, or the
/// default), or built for this call. Either way the call holds a reference
/// and at most a box, so moving a call copies little.
pub(super) struct CallPolicy {
    fixed: &'static Policy,
    built: Option<Box<Policy>>,
}

impl CallPolicy {
    fn fixed(policy: &'static Policy) -> CallPolicy {
        CallPolicy {
            fixed: policy,
            built: None,
        }
    }

    fn built(policy: Policy) -> CallPolicy {
        CallPolicy {
            fixed: &Policy::DEFAULT,
            built: Some(Box::new(policy)),
        }
    }

    /// The policy in force.
    pub(super) fn get(&self) -> &Policy {
        self.built.as_deref().unwrap_or(self.fixed)
    }

    /// The policy, copied out of the fixed one to be changed.
    fn make_mut(&mut self) -> &mut Policy {
        let fixed = self.fixed;
        self.built.get_or_insert_with(|| Box::new(fixed.clone()))
    }

    /// The note a replay carries: moved out of a built policy, copied from
    /// a fixed one (a `static`'s notes are borrowed text).
    pub(super) fn take_replay_note(&mut self) -> Option<Cow<'static, str>> {
        match &mut self.built {
            Some(built) => built.replay_note.take(),
            None => self.fixed.replay_note.clone(),
        }
    }

    /// The note a conflict on arguments carries; see
    /// [`CallPolicy::take_replay_note`].
    pub(super) fn take_conflict_note(&mut self) -> Option<Cow<'static, str>> {
        match &mut self.built {
            Some(built) => built.conflict_note.take(),
            None => self.fixed.conflict_note.clone(),
        }
    }
}
