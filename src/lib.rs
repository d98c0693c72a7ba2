//! Make an LLM agent's tool carry out its real-world action once per ask,
//! however many times the model calls it.
//!
//! A model that asks for the same refund twice, in one step or across two,
//! gets one refund: the second call replays the first result, with a note
//! saying it was already done. The same order asked with another amount is
//! a conflict, not a second refund.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use idempotent_tools::{Outcome, Run, idempotent};
//!
//! static REFUNDS_SENT: AtomicUsize = AtomicUsize::new(0);
//!
//! #[derive(Debug, thiserror::Error)]
//! enum PayError {
//!     #[error(transparent)]
//!     Idempotency(#[from] idempotent_tools::Error),
//! }
//!
//! /// `<run>` is the agent run in scope; `reason` is the model's wording,
//! /// kept out of the key.
//! #[idempotent(key = "<run>:refund:<order_id>")]
//! async fn refund_order(
//!     order_id: u64,
//!     cents: u64,
//!     #[free_text] reason: String,
//! ) -> Result<Outcome<u64>, PayError> {
//!     let _ = reason;
//!     REFUNDS_SENT.fetch_add(1, Ordering::SeqCst);
//!     Ok(cents)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), PayError> {
//! Run::new("run-7")?
//!     .scope(async {
//!         let first = refund_order(1182, 4200, "damaged".into()).await?;
//!         let again = refund_order(1182, 4200, "arrived broken".into()).await?;
//!         let other = refund_order(1182, 4100, "damaged".into()).await?;
//!         assert!(first.is_fresh());
//!         assert!(again.is_replay());
//!         assert!(other.is_conflict());
//!         Ok::<_, PayError>(())
//!     })
//!     .await?;
//! assert_eq!(REFUNDS_SENT.load(Ordering::SeqCst), 1);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idempotent_tools_runtime::*;

/// Makes an async tool carry out its action once per ask.
///
/// ```
/// use idempotent_tools::{idempotent, Outcome, Run};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, thiserror::Error)]
/// enum PayError {
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_tools::Error),
/// }
///
/// #[derive(Clone, Serialize, Deserialize)]
/// struct Refund { order_id: String, usd: u64 }
///
/// #[idempotent(key = "<run>:refund:<order_id>")]
/// async fn refund_order(
///     run: Run,
///     order_id: String,
///     usd: u64,
///     #[free_text] reason: String,
/// ) -> Result<Outcome<Refund>, PayError> {
///     // The provider is called here, once per ask.
///     Ok(Refund { order_id, usd })
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), PayError> {
/// let run = Run::new("run-7")?;
/// let first = refund_order(run.clone(), "1182".into(), 42, "damaged".into()).await?;
/// let again = refund_order(run.clone(), "1182".into(), 42, "it arrived broken".into()).await?;
/// assert!(first.is_fresh());
/// assert!(again.is_replay());
/// # Ok(()) }
/// ```
pub use idempotent_tools_macros::idempotent;

/// Lets a newtype or a fieldless enum be part of an idempotency key.
///
/// ```
/// use idempotent_tools::{Key, KeyPart};
///
/// #[derive(KeyPart)]
/// struct OrderId(u64);
///
/// #[derive(KeyPart)]
/// enum Currency {
///     Usd,
///     #[key_part(rename = "eur")]
///     Euro,
/// }
///
/// let key = Key::builder()
///     .part("order", &OrderId(1182))?
///     .literal(":")?
///     .part("currency", &Currency::Euro)?
///     .finish()?;
/// assert_eq!(key.as_str(), "1182:eur");
/// # let _ = Currency::Usd;
/// # Ok::<(), idempotent_tools::Error>(())
/// ```
pub use idempotent_tools_macros::KeyPart;
