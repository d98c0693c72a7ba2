//! The run-time half of [`idempotent-tools`](https://docs.rs/idempotent-tools): the
//! claim-first guard, keys, runs, outcomes and stores.
//!
//! Most users depend on `idempotent-tools` and write `#[idempotent(key = "...")]`;
//! this crate is what that attribute expands into, and it works by hand too
//! (see [`Call`]).
//!
//! A call flows one way: a [`Key`] names the action (run, action, object) and
//! a [`Fingerprint`] digests the arguments outside the key; a [`Call`] asks
//! the [`Store`] to **claim** the key ([`Store::claim`], atomic in every
//! store); the caller that wins **acts**, while a lease it renews keeps the
//! claim its own; it then **completes** the record with the result, which
//! every later call with that key gets back as an [`Outcome::Replay`]. A
//! failed action **releases** the claim so a retry acts again. Modules:
//! `key` and `fingerprint` name and digest the ask, `guard` runs the claim,
//! the action and the completion, [`store`] keeps the claims and records,
//! `record` is what a finished action leaves behind, and `observe` emits
//! its traces and metrics.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod call_id;
mod error;
mod fingerprint;
mod free_text;
mod guard;
mod key;
mod observe;
mod outcome;
mod policy;
mod record;
mod run;
mod tool;

pub mod store;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(any(feature = "rig", feature = "rmcp"))]
mod adapters;
#[cfg(feature = "rig")]
pub use adapters::rig;
#[cfg(feature = "rmcp")]
pub use adapters::rmcp;

pub use call_id::CallId;
pub use error::Error;
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use free_text::FreeText;
pub use guard::{Call, current_key};
pub use key::{
    Key, KeyBuilder, KeyError, KeyPart, KeyPartWriter, KeyTextProblem, PROVIDER_KEY_MAX,
};
pub use outcome::{
    ConflictReason, DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE, OTHER_TOOL_NOTE, Outcome,
    ToolOutput,
};
pub use policy::{DEFAULT_LEASE, DEFAULT_RETENTION, DEFAULT_WAIT, Policy, Takeover};
pub use record::{Ending, Finished, Recorded};
pub use run::Run;
#[cfg(feature = "postgres")]
pub use store::PostgresStore;
#[cfg(feature = "redis")]
pub use store::RedisStore;
#[cfg(feature = "sqlite")]
pub use store::SqliteStore;
pub use store::{
    Claim, ClaimAnswer, ClaimRequest, Forget, IntoStore, MemoryStore, Record, RecordCount,
    RecordPage, RecordQuery, RecordState, Records, Store, StoreError, StoreFuture, StoreResult,
    Wait, default_store, set_default_store,
};
pub use tool::ToolId;

// Versioned with the release, so that `#[idempotent]` from another release
// fails to compile against this one (see the module's doc).
#[doc(hidden)]
#[path = "__private/mod.rs"]
pub mod __private0_1;
