//! Make an LLM agent's tool carry out its real-world action once per ask,
//! however many times the model calls it.
//!
//! Models repeat tool calls: twice in one step under two call ids, again in
//! a later step, again after a timeout. A refund tool that simply acts
//! refunds twice. `#[idempotent(key = "...")]` names the action by what was
//! asked (the run and the order, never the model's wording or the call id),
//! claims that key in a store *before* the body runs, and gives every other
//! call with the key the first result instead of acting again.
//!
//! ```
//! use idempotent_tools::{Outcome, Run, current_key, idempotent};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Debug, Serialize, Deserialize)]
//! struct Refund {
//!     id: String,
//!     cents: u64,
//! }
//!
//! #[derive(Debug, thiserror::Error)]
//! enum PayError {
//!     // The guard's own errors (store down, no run, ...) reach the caller as `PayError`.
//!     #[error(transparent)]
//!     Idempotency(#[from] idempotent_tools::Error),
//!     #[error("the provider declined the refund")]
//!     Declined,
//! }
//!
//! /// Stands in for the payment provider's client.
//! struct Payments;
//!
//! impl Payments {
//!     async fn refund(&self, order_id: u64, cents: u64, key: Option<String>) -> Result<Refund, PayError> {
//!         let _ = key; // a real client sends it as its idempotency key
//!         if cents == 0 {
//!             return Err(PayError::Declined);
//!         }
//!         Ok(Refund { id: format!("re_{order_id}"), cents })
//!     }
//! }
//!
//! #[idempotent(key = "<run>:refund:<order_id>")]
//! async fn refund_order(
//!     order_id: u64,
//!     cents: u64,
//!     #[free_text] reason: String, // the model's wording: never in the key
//! ) -> Result<Outcome<Refund>, PayError> {
//!     let _ = reason;
//!     // Hand the same key to the provider, so a retry after a crash is deduplicated there too.
//!     let key = current_key().map(|k| k.provider_key().into_owned());
//!     Payments.refund(order_id, cents, key).await
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // One agent run of your own loop: `<run>` reads the run in scope.
//!     Run::new("run-7")?
//!         .scope(async {
//!             let first = refund_order(1182, 4200, "arrived damaged".into()).await?;
//!             let again = refund_order(1182, 4200, "the customer asked again".into()).await?;
//!             assert!(first.is_fresh());
//!             assert!(again.is_replay()); // the first refund, and a note for the model
//!             Ok::<_, PayError>(())
//!         })
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! The body returns `Result<Refund, PayError>`; the caller gets
//! [`Outcome::Fresh`], [`Outcome::Replay`] (the first result, with a note
//! that tells the model nothing new was done) or [`Outcome::Conflict`] (the
//! same key asked with other arguments, such as $41 after $42). A repeat is
//! not an error, so the model reads "already done" rather than a failure it
//! might retry in other words. The error type takes the guard's own errors
//! through `From<`[`Error`]`>`; each says whether the action ran
//! ([`Error::action_ran`]).
//!
//! `<run>` reads an argument named `run`, or else the run in scope
//! ([`Run::scope`]), as in an agent loop of your own. rig and rmcp run tools
//! where such a scope does not reliably reach, so their adapters hand each
//! call its run: see the [rig guide] and the [rmcp guide].
//!
//! # Where things are
//!
//! The root holds what a tool author writes: the attribute, [`KeyPart`],
//! [`Outcome`], [`Run`], [`Error`], [`FreeText`], [`CallId`],
//! [`current_key`], the stores and [`set_default_store`]. Everyone else
//! has a module of their own:
//!
//! | Module | For | Holds |
//! |---|---|---|
//! | [`call`] | a call built by hand, with no attribute | [`Call`](call::Call), [`Key`](call::Key), [`Fingerprint`](call::Fingerprint), [`Policy`](call::Policy), the notes |
//! | [`store`] | a store of one's own; a store's settings | the [`Store`](store::Store) protocol and its types; each store's builder, defaults and schema |
//! | [`records`] | operators: dashboards, scripts, clean-up | [`Records`](records::Records): list, inspect, count, forget, purge; the [`Purger`](records::Purger) |
//! | `rig`, `rmcp` | a framework's tools | the run carried into each call |
//!
//! Tests have a crate of their own, `idempotent-tools-testing`: a scripted
//! model that repeats calls as models do, a stand-in provider that counts
//! what reached it, and the conformance suite a store of one's own runs.
//!
//! # Features
//!
//! None is on by default: the default build is the attribute, the guard and
//! the in-memory store, with no framework and no database client.
//!
//! | Feature | Brings | For |
//! |---|---|---|
//! | `sqlite` | `SqliteStore`: claims in an SQLite file (bundled, no server) | several processes on one host, or one that must survive restarts |
//! | `postgres` | `PostgresStore` on tokio-postgres and deadpool-postgres, woken by `LISTEN`/`NOTIFY` | several hosts |
//! | `redis` | `RedisStore` on redis-rs, one Lua script per step, woken by pub/sub, records kept by key expiry | several hosts that already run Redis, Valkey or a Redis Cluster |
//! | `metrics` | counters and histograms of guarded calls and store steps through the `metrics` facade ([the names](guide::operations)) | dashboards and alerts |
//! | `rig` | `idempotent_tools::rig`: `InRun`, `context` and `run_of`, the run carried in rig 0.44's `ToolContext` | rig agents |
//! | `reqwest` | `idempotent_tools::reqwest`: the call's key as the `Idempotency-Key` header of reqwest 0.13 requests (a reqwest-middleware middleware, or `idempotency_key()` on a request builder), and reqwest's errors [classified](Classify) as definite or unknown | tools that call their provider over HTTP |
//! | `rmcp` | `idempotent_tools::rmcp`: `run: Run` resolved from each MCP request, `ResolvesRuns`, `RunPolicy`, `RunHeaderLayer`, and `Outcome` as a tool result | MCP servers on rmcp 3.11 |
//!
//! The framework adapters are features because they implement rig's and
//! rmcp's traits for this crate's types, which only this crate may do, and
//! because an application that uses neither should not build them.
//!
//! # Choosing a store
//!
//! Every store answers the same atomic claim, so a guarded call behaves the
//! same on each; what differs is who sees the claim. [`MemoryStore`] is the
//! process default. [`guide::stores`] says which store suits which
//! deployment, how to set each up, and what happens when one is down;
//! switch the default with [`set_default_store`], or name a store per tool
//! with `store = ...` on the attribute.
//!
//! # What a guarded call does
//!
//! It claims its key before the action runs, in one atomic step in the
//! store, so two calls that arrive together cannot both act. The table of
//! every case (in flight, completed, other arguments, another tool, a
//! crashed holder, a dropped future) is in [`guide::calls`].
//!
//! # Releases
//!
//! The attribute and this crate come as one release: this crate pins its
//! macro and runtime crates with `=`. The code `#[idempotent]` expands into
//! calls a private module named after its release (`__private0_1`), so a
//! macro of one release used with this crate of another fails to compile,
//! with an error naming that module, rather than run calls whose meaning has
//! changed.
//!
//! [rig guide]: guide::rig
//! [rmcp guide]: guide::rmcp
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idempotent_tools_runtime::*;

// The attribute and the derive are documented, with examples written
// against this crate, where they are defined: a doc comment here would be
// shown above theirs, and their summaries twice.
pub use idempotent_tools_macros::{Classify, KeyPart, idempotent};

/// The manual, a chapter a module: what a guarded call does, what may go in
/// a key, the stores, operations, the rig and rmcp adapters, and the MCP
/// gateway for servers in other languages. The README
/// is the short tour; these pages are the rest.
//
// Left out of this crate's doctests: the rig and rmcp chapters need those
// frameworks, so every chapter is compiled and run by the `frameworks`
// package's doctests instead, beside the README.
#[cfg(not(doctest))]
pub mod guide {
    #[doc = include_str!("../guide/calls.md")]
    pub mod calls {}
    #[doc = include_str!("../guide/keys.md")]
    pub mod keys {}
    #[doc = include_str!("../guide/stores.md")]
    pub mod stores {}
    #[doc = include_str!("../guide/operations.md")]
    pub mod operations {}
    #[doc = include_str!("../guide/rig.md")]
    pub mod rig {}
    #[doc = include_str!("../guide/rmcp.md")]
    pub mod rmcp {}
    #[doc = include_str!("../guide/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../guide/transactions.md")]
    pub mod transactions {}
    #[doc = include_str!("../guide/unknown.md")]
    pub mod unknown {}
    #[doc = include_str!("../guide/gateway.md")]
    pub mod gateway {}
}
