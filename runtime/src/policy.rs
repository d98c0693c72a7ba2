//! How a call site wants its guard to behave.

use std::borrow::Cow;
use std::time::Duration;

/// The default retention: a week, longer than payment providers remember
/// idempotency keys (Stripe: 24 hours), so a late retry is still caught here.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The default deadline for waiting on an in-flight duplicate: twice the
/// [`DEFAULT_LEASE`], so that a duplicate waiting on a holder that crashed
/// is still waiting when the holder's lease runs out, and takes over then
/// instead of giving up with [`Error::InProgress`](crate::Error::InProgress).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// The default lease on a claim. The guard renews it (every third of it)
/// while the action runs, so it bounds how long a crashed holder blocks a
/// key, not how long an action may take. Keep a call site's `wait` longer
/// than its `lease`, for the reason given at [`DEFAULT_WAIT`].
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// What to do when a claim is taken over from a holder that stopped
/// mid-action (its lease expired): it may or may not have acted.
///
/// **The default, [`Rerun`](Takeover::Rerun), runs the action again.** It
/// is safe only where the provider deduplicates by the key the action hands
/// it ([`current_key`](crate::current_key)). Where the provider takes no
/// key, a holder that crashed after the provider acted, and before its
/// record was written, has its action done twice: such a call site names
/// [`Verify`](Takeover::Verify), with a verification that asks the provider,
/// or [`ReportUnknown`](Takeover::ReportUnknown). (With `#[idempotent]`,
/// `verify = ...` makes `Verify` the default; see `takeover` there.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Takeover {
    /// Run the action again. The default: the key handed to the provider
    /// (see [`current_key`](crate::current_key)) deduplicates there, so a
    /// half-finished first attempt is not repeated.
    #[default]
    Rerun,
    /// Do not run it. Record the outcome as unknown, and answer this call and
    /// every later one with [`Error::UnknownOutcome`](crate::Error::UnknownOutcome)
    /// until an operator [forgets](crate::records::Records::forget) the key. For
    /// providers that take no key and cannot be asked.
    ReportUnknown,
    /// Ask the provider, through the call's
    /// [verification](crate::call::Call::verify): replay what it applied,
    /// act if it did not (once the [settle](Policy::settle) time has
    /// passed), and record the outcome as unknown if it cannot tell within
    /// the call's `wait` or contradicts the ask. For providers that take no
    /// key but can be asked. Without a verification, as
    /// [`Takeover::ReportUnknown`].
    Verify,
}

/// A call site's settings. Every field has a default.
#[derive(Debug, Clone)]
pub struct Policy {
    /// How long a completed record is kept.
    pub retention: Duration,
    /// How long a duplicate waits for an in-flight call before it gets
    /// [`Error::InProgress`](crate::Error::InProgress).
    pub wait: Duration,
    /// The claim's lease (see [`DEFAULT_LEASE`]).
    pub lease: Duration,
    /// What a takeover does.
    pub takeover: Takeover,
    /// How long after the action may last have run a verification's "not
    /// applied" is still not trusted. It must cover both how far the
    /// provider's lookups lag behind its writes and how late a request that
    /// timed out can still reach the provider and take effect: a
    /// settle time shorter than either lets a retry act beside a late first
    /// request (the claim protocol's model finds that double effect).
    /// Zero by default.
    pub settle: Duration,
    /// The note a replay carries for the model.
    pub replay_note: Option<Cow<'static, str>>,
    /// The note a conflict on arguments carries for the model.
    pub conflict_note: Option<Cow<'static, str>>,
}

impl Policy {
    /// Every default, as a constant: a `static` policy names the fields it
    /// changes and takes the rest from here.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools::call::Policy;
    ///
    /// static SHOP: Policy = Policy {
    ///     wait: Duration::from_secs(60),
    ///     ..Policy::DEFAULT
    /// };
    /// assert_eq!(SHOP.lease, Policy::DEFAULT.lease);
    /// ```
    pub const DEFAULT: Policy = Policy {
        retention: DEFAULT_RETENTION,
        wait: DEFAULT_WAIT,
        lease: DEFAULT_LEASE,
        takeover: Takeover::Rerun,
        settle: Duration::ZERO,
        replay_note: None,
        conflict_note: None,
    };
}

impl Default for Policy {
    fn default() -> Self {
        Policy::DEFAULT
    }
}
