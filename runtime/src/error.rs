//! The one error type of a guarded call.

use crate::key::{Key, KeyError};
use crate::store::StoreError;

/// Why a guarded call did not run, or could not be recorded.
///
/// A tool's own error type takes these with `From<idempotent::Error>`, so
/// `#[idempotent]` can report them through the tool's `Result`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store failed or could not be reached. The action did not run, and
    /// nothing was recorded as done.
    #[error("the idempotency store failed, so the action was not run: {0}")]
    Store(#[source] StoreError),

    /// The key names `<run>` but no run is in scope and no `run` argument was
    /// given. Acting without the run could merge one action across runs.
    #[error(
        "no run in scope: the key names `<run>`, so wrap the agent run in `Run::scope(..)`, \
         give the tool a `run` argument, or hand the run to the framework (rig: put it in the \
         tool context with `idempotent::rig::context`; rmcp: send it in the request's \
         `_meta` with `idempotent::rmcp::with_run`); the action was not run"
    )]
    MissingRun,

    /// A run id was empty.
    #[error("a run id must not be empty; an empty run would merge every run's actions")]
    EmptyRun,

    /// A key could not be built from the call's values.
    #[error("bad idempotency key: {0}")]
    Key(#[from] KeyError),

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
    /// expired. Its result was not recorded; the new holder's stands.
    #[error(
        "the claim on key `{key}` was taken over after its lease expired; this result was not recorded"
    )]
    LeaseLost {
        /// The key whose claim was lost.
        key: Key,
    },

    /// A holder crashed mid-action, and the takeover policy says not to run
    /// the action again. Whether it happened is unknown: check with the
    /// provider, then [`forget`](crate::Store::forget) the key to allow a retry.
    #[error(
        "an earlier holder of key `{key}` stopped mid-action; whether the action happened is unknown, \
         so it was not run again"
    )]
    UnknownOutcome {
        /// The key whose outcome is unknown.
        key: Key,
    },

    /// An argument could not be serialized for the fingerprint.
    #[error("an argument could not be fingerprinted: {0}")]
    Fingerprint(#[source] serde_json::Error),

    /// A result could not be serialized for the store, or a recorded result
    /// could not be read back as the tool's type.
    #[error("a recorded result could not be encoded or decoded: {0}")]
    Codec(#[source] serde_json::Error),
}

impl From<StoreError> for Error {
    fn from(err: StoreError) -> Error {
        Error::Store(err)
    }
}
