//! The test kit of `idempotent-tools`: a scripted model, a runner and a stand-in payment provider,
//! so a test can send a tool the duplicates a real model sends and count what
//! reached the provider. No agent framework and no API key are needed.
//!
//! - [`ScriptedModel`]: steps of [`ToolCall`]s made at once, then an answer.
//! - [`Runner`]: runs each step's calls at the same time (joined in one task,
//!   or spawned), with a tool-call concurrency cap, and feeds the results back
//!   to the model. It returns the [`Transcript`] of what the model saw.
//! - [`Provider`]: keeps the first refund under a key, makes one per call
//!   without a key, takes a real (yielding) network delay, and counts.
//! - [`assert_one_action`] and [`assert_same_key_for_same_ask`].
//! - [`conformance`]: the suite that proves a [`Store`](idempotent_tools::store::Store) keeps
//!   every promise the project's stores keep; one call runs it all.
//! - [`storm`]: a duplicate storm on a tool of your own: random schedules of
//!   asks, cancellations and store faults, checked, shrunk and replayable.
//!
//! Add it as a dev-dependency beside `idempotent-tools`, at the same version.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idempotent_tools_testing::{
//!     Provider, ProviderError, Refund, Runner, ScriptedModel, ToolCall, Tools, assert_one_action,
//! };
//! use idempotent_tools::{CallId, MemoryStore, Outcome, Run, call::{Call, Key, KeyError}, current_key};
//! use serde_json::json;
//!
//! #[derive(Debug, thiserror::Error)]
//! enum PayError {
//!     #[error(transparent)]
//!     Idempotency(#[from] idempotent_tools::Error),
//!     #[error(transparent)]
//!     Key(#[from] KeyError),
//!     #[error(transparent)]
//!     Provider(#[from] ProviderError),
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Args { order_id: String, usd: u64 }
//!
//! // A guarded refund: the key names the run and the order.
//! async fn refund(provider: Provider, store: Arc<MemoryStore>, args: Args) -> Result<Outcome<Refund>, PayError> {
//!     let run = Run::current().ok_or(idempotent_tools::Error::MissingRun)?;
//!     let key = Key::builder().part("run", &run)?.literal(":refund:")?.part("order_id", &args.order_id)?.finish()?;
//!     Call::new("shop::refund", key)
//!         .store(store)
//!         .run(async move {
//!             // The guard's key, handed on as the provider's own idempotency key.
//!             let key = current_key().map(|key| key.provider_key().into_owned());
//!             Ok(provider.refund(&args.order_id, args.usd, key.as_deref()).await?)
//!         })
//!         .await
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), idempotent_tools::Error> {
//! let provider = Provider::with_delay(Duration::from_millis(1));
//! let store = Arc::new(MemoryStore::new());
//! let tools = Tools::new().tool("refund_order", {
//!     let provider = provider.clone();
//!     move |args: Args, _call: CallId| refund(provider.clone(), Arc::clone(&store), args)
//! });
//!
//! // The model asks for the same refund twice in one step, under two ids.
//! let ask = ToolCall::new("call_a", "refund_order", json!({ "order_id": "1182", "usd": 42 }));
//! let model = ScriptedModel::new().step([ask.clone(), ask.with_id("call_b")]).answer("Refunded.");
//! let transcript = Runner::new().in_run(Run::new("run-1")?).run(model, &tools).await;
//!
//! assert_one_action(&provider);
//! assert_eq!(transcript.result("call_b").and_then(|r| r.status()), Some("replay"));
//! # Ok(()) }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod assert;
pub mod conformance;
mod model;
mod provider;
mod runner;
pub mod storm;
mod tools;

pub use assert::{assert_one_action, assert_same_key_for_same_ask};
pub use model::{ScriptedModel, ToolCall, ToolResult, Turn};
pub use provider::{
    DEFAULT_DELAY, Lag, LostCall, Moment, Provider, ProviderError, Received, Refund,
};
pub use runner::{Concurrency, Runner, Transcript};
pub use tools::Tools;
