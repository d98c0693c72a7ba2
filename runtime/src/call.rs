//! Calls built by hand, and the parts `#[idempotent]` builds for you.
//!
//! A [`Call`] is what the attribute expands into: a [`Key`] that names the
//! action, a [`Fingerprint`] of the arguments outside it, a [`Policy`] for
//! leases, waiting and retention, and the [`ToolId`] of the tool that acts.
//! Build one when a tool cannot carry the attribute: a closure, a trait
//! object, a key assembled at run time.

// The same text as the attribute's `macros/src/names.rs`, which a test
// holds.
#[path = "names.rs"]
pub mod names;

pub use crate::fingerprint::{Fingerprint, FingerprintBuilder, FingerprintError};
pub use crate::guard::Call;
pub use crate::key::{Key, KeyBuilder, KeyError, KeyPartWriter, KeyTextProblem, PROVIDER_KEY_MAX};
pub use crate::outcome::{
    ConflictReason, DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE, OTHER_TOOL_NOTE, ToolOutput,
};
pub use crate::policy::{DEFAULT_LEASE, DEFAULT_RETENTION, DEFAULT_WAIT, Policy, Takeover};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use crate::store::transaction::{TransactionFuture, TransactionalStore};
pub use crate::tool::ToolId;
