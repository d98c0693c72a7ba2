//! The one error type of a guarded call.

use crate::fingerprint::FingerprintError;
use crate::key::{Key, KeyError};
use crate::run::RunError;
use crate::store::StoreError;

/// Why a guarded call did not run, or could not be recorded.
///
/// A tool's own error type takes these with `From<idempotent_tools::Error>`, so
/// `#[idempotent]` can report them through the tool's `Result`. Every
/// variant says whether the action ran ([`Error::action_ran`]): most did not
/// run it at all; [`Error::NotRecorded`] and [`Error::LeaseLost`] come after
/// it ran, and [`Error::UnknownOutcome`] after a holder whose end is unknown.
///
/// Messages name their own cause only; the store's error is the
/// [`source`](std::error::Error::source), so an error chain (`{:#}` in
/// anyhow, `tracing`'s error fields) prints each cause once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store failed or could not be reached before the action. The
    /// action did not run, and nothing was recorded as done.
    #[error("the idempotency store failed, so the action was not run")]
    Store(#[source] StoreError),

    /// The action ran, but its result could not be recorded: the store
    /// stayed unreachable while the lease held, or the result cannot be
    /// stored faithfully (a `NaN`, a map with non-string keys).
    ///
    /// Do not run the action again by hand. Later calls with the same key
    /// find the claim held until its lease runs out and then follow the
    /// takeover policy, as after a crash; a result that cannot be stored is
    /// recorded as an unknown outcome instead, so no later call runs it.
    #[error(
        "the action under key `{key}` ran, but its result could not be recorded; \
         it must not be run again as if nothing happened"
    )]
    NotRecorded {
        /// The key the action ran under.
        key: Key,
        /// The result as JSON, where it could be serialized.
        result: Option<String>,
        /// Why it could not be recorded.
        #[source]
        cause: StoreError,
    },

    /// The key names `<run>` but no run is in scope and no `run` argument was
    /// given. Acting without the run could merge one action across runs.
    #[error(
        "no run in scope: the key names `<run>`, so wrap the agent run in `Run::scope(..)`, \
         give the tool a `run` argument, or let the framework hand it over (rig: put it in the \
         tool context with `idempotent_tools::rig::context`; rmcp: take `run: Run` as an argument, which \
         the server resolves from each request); the action was not run"
    )]
    MissingRun,

    /// A run id was refused.
    #[error(transparent)]
    Run(#[from] RunError),

    /// A key could not be built from the call's values. A key that names
    /// `<run>` outside any run is [`Error::MissingRun`] instead.
    #[error("the idempotency key could not be built, so the action was not run")]
    Key(#[source] KeyError),

    /// Another call with this key is still in flight, and it did not finish
    /// before the wait deadline. Nothing ran.
    #[error(
        "the same action (key `{key}`) is still in progress in another call; nothing was run. \
         Its result will be replayed once it finishes"
    )]
    InProgress {
        /// The key in flight.
        key: Key,
    },

    /// The action used its own key again from inside itself. Waiting would
    /// deadlock, so the inner call fails at once.
    #[error("key `{key}` was used again inside its own action; that call would wait on itself")]
    Reentrant {
        /// The key in use.
        key: Key,
    },

    /// This holder's claim was taken over by another after its lease
    /// expired. The action ran, but its result was not recorded; the new
    /// holder's stands.
    #[error(
        "the action under key `{key}` ran, but its claim was taken over after its lease expired, \
         so this result was not recorded"
    )]
    LeaseLost {
        /// The key whose claim was lost.
        key: Key,
    },

    /// The action ran in a transaction on the store's database, and that
    /// transaction was rolled back: its writes vanished with its record, so
    /// the action did not take effect. The cause says why: the claim was
    /// taken over after its lease expired ([`StoreError::LeaseLost`]: the
    /// new holder's result stands), the result cannot be recorded, or the
    /// database refused the completion or the commit. A retry acts again.
    #[error(
        "the action under key `{key}` was rolled back with its transaction, \
         so it did not take effect"
    )]
    RolledBack {
        /// The key the action ran under.
        key: Key,
        /// Why the transaction was rolled back.
        #[source]
        cause: StoreError,
    },

    /// The outcome of an earlier call under this key is not on record: its
    /// holder stopped mid-action and the takeover policy says not to run it
    /// again, or its result could not be stored. Check with the provider,
    /// then resolve the key: with the operator's tool
    /// (`idempotent-tools resolve KEY --applied JSON` or `--not-applied`) or
    /// [`Records::resolve`](crate::records::Records::resolve). Until then,
    /// every call keeps answering this instead of acting twice.
    #[error(
        "the outcome of an earlier call under key `{key}` is not on record (its holder stopped \
         mid-action, or its result could not be stored), so the action was not run again; \
         check with the provider, then resolve the key (`idempotent-tools resolve '{key}'` \
         with `--applied JSON` or `--not-applied`, or `Records::resolve`)"
    )]
    UnknownOutcome {
        /// The key whose outcome is unknown.
        key: Key,
    },

    /// An argument could not be serialized for the fingerprint.
    #[error("an argument could not be fingerprinted, so the action was not run")]
    Fingerprint(#[from] FingerprintError),

    /// A recorded result could not be read back as the tool's type (the
    /// tool's result type changed since it was recorded). Nothing ran now.
    #[error("a recorded result could not be read back as the tool's result type")]
    Codec(#[source] serde_json::Error),
}

impl Error {
    /// Whether the action ran in the call that returned this error:
    /// `Some(false)` if it did not, `Some(true)` if it ran but its result
    /// was not recorded, `None` if an earlier holder's outcome is unknown.
    /// An action whose transaction was rolled back ([`Error::RolledBack`])
    /// took no effect: `Some(false)`.
    ///
    /// A tool can tell its caller (or the model) the truth with it: after
    /// `Some(true)` the action must not be asked for again as if nothing
    /// happened.
    ///
    /// ```
    /// use idempotent_tools::Error;
    ///
    /// assert_eq!(Error::MissingRun.action_ran(), Some(false));
    /// ```
    pub fn action_ran(&self) -> Option<bool> {
        match self {
            Error::NotRecorded { .. } | Error::LeaseLost { .. } => Some(true),
            Error::UnknownOutcome { .. } => None,
            _ => Some(false),
        }
    }
}

impl From<StoreError> for Error {
    fn from(err: StoreError) -> Error {
        Error::Store(err)
    }
}

/// A key's error, where the guard has a name of its own for it: a key
/// built outside any run is [`Error::MissingRun`].
impl From<KeyError> for Error {
    fn from(error: KeyError) -> Error {
        match error {
            KeyError::NoRun => Error::MissingRun,
            other => Error::Key(other),
        }
    }
}
