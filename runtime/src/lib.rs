//! The run-time half of [`idempotent-tools`](https://docs.rs/idempotent-tools): the
//! claim-first guard, keys, runs, outcomes and stores.
//!
//! Most users depend on `idempotent-tools` and write `#[idempotent(key = "...")]`;
//! this crate is what that attribute expands into, and it works by hand too
//! (see [`call`]).
//!
//! A call flows one way: a [`Key`](call::Key) names the action (run, action,
//! object) and a [`Fingerprint`](call::Fingerprint) digests the arguments
//! outside the key; a [`Call`](call::Call) asks the [`Store`](store::Store)
//! to **claim** the key (atomic in every store); the caller that wins
//! **acts**, while a lease it renews keeps the claim its own; it then
//! **completes** the record with the result, which every later call with
//! that key gets back as an [`Outcome::Replay`]. A failed action
//! **releases** the claim so a retry acts again.
//!
//! # The house
//!
//! In the source, imports run one way, downwards through this list:
//!
//! - `__private` and `adapters`: what the attribute expands into, and the
//!   rig, rmcp and reqwest adapters; they call the guard;
//! - `guard`: the claim, the action and the completion of one call. It
//!   speaks to every store through the [`Store`](store::Store) trait and,
//!   for an action in the store's own transaction, through the seam in
//!   `store/transaction.rs`; it names no durable store;
//! - `store`: the trait and its vocabulary (`claim`, `record`, `records`,
//!   `error`) at its top, then one folder per store (`memory`, `sqlite`,
//!   `postgres`, `redis`) over their shared core (`durable`). A store's
//!   `transaction.rs` is its half of a call in a transaction. Between
//!   the guard and the stores sit `error` (what a caller is told) and
//!   `observe` (traces and metrics);
//! - `key`, `fingerprint`, `run`, `outcome`, `policy`, `tool`: the
//!   vocabulary of an ask and its answer.
//!
//! Within a folder, its `mod.rs` holds what its files share, and the files
//! import one another one way: no two files import each other, a test holds
//! it. The public modules are doors for their readers: [`call`], [`store`]
//! and [`records`]; the test kit is the `idempotent-tools-testing` crate.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod call_id;
mod error;
mod failure;
mod fingerprint;
mod free_text;
mod guard;
mod key;
mod observe;
mod outcome;
mod policy;
mod run;
mod tool;

pub mod store;

#[cfg(any(feature = "rig", feature = "rmcp", feature = "reqwest"))]
mod adapters;
#[cfg(feature = "reqwest")]
pub use adapters::reqwest;
#[cfg(feature = "rig")]
pub use adapters::rig;
#[cfg(feature = "rmcp")]
pub use adapters::rmcp;

pub mod call;
pub mod records;

/// The target of every span and event: filter with
/// `RUST_LOG=idempotent_tools=info`.
pub(crate) const TARGET: &str = "idempotent_tools";

pub use call_id::CallId;
pub use error::Error;
pub use failure::{Classify, Failure, Verified};
pub use free_text::FreeText;
pub use guard::current_key;
pub use key::KeyPart;
pub use outcome::Outcome;
pub use run::{Run, RunError};
pub use store::default::set_default_store;
pub use store::memory_store::MemoryStore;
#[cfg(feature = "postgres")]
pub use store::postgres_store::PostgresStore;
#[cfg(feature = "redis")]
pub use store::redis_store::RedisStore;
#[cfg(feature = "sqlite")]
pub use store::sqlite_store::SqliteStore;

// Versioned with the release, so that `#[idempotent]` from another release
// fails to compile against this one (see the module's doc).
#[doc(hidden)]
#[path = "__private/mod.rs"]
pub mod __private0_1;
