//! The run-time half of [`idempotent-tools`](https://docs.rs/idempotent-tools): the
//! claim-first guard, keys, runs, outcomes and stores.
//!
//! Most users depend on `idempotent-tools` and write `#[idempotent(key = "...")]`;
//! this crate is what that attribute expands into, and it works by hand too
//! (see [`Call`]).
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod error;
mod fingerprint;
mod guard;
mod key;
mod observe;
mod outcome;
mod policy;
mod record;
mod run;
mod text;

pub mod store;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(any(feature = "rig", feature = "rmcp"))]
mod adapters;
#[cfg(feature = "rig")]
pub use adapters::rig;
#[cfg(feature = "rmcp")]
pub use adapters::rmcp;

pub use error::Error;
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use guard::{Call, current_key};
pub use key::{Key, KeyBuilder, KeyError, KeyPart, KeyPartWriter, PROVIDER_KEY_MAX};
pub use outcome::{
    ConflictReason, DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE, OTHER_TOOL_NOTE, Outcome,
    ToolOutput,
};
pub use policy::{DEFAULT_LEASE, DEFAULT_RETENTION, DEFAULT_WAIT, Policy, Takeover};
pub use record::{Ending, Finished, Recorded, ToolId};
pub use run::Run;
#[cfg(feature = "postgres")]
pub use store::PostgresStore;
#[cfg(feature = "sqlite")]
pub use store::SqliteStore;
pub use store::{
    Claim, ClaimRequest, ClaimState, Forget, IntoStore, MemoryStore, Record, RecordCount,
    RecordPage, RecordQuery, RecordState, Store, StoreError, StoreFuture, StoreResult, Wait,
    default_store, set_default_store,
};
pub use text::{CallId, FreeText};

#[doc(hidden)]
pub mod __private;
