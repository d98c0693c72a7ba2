//! The compile-time half of [`idempotent-tools`](https://docs.rs/idempotent-tools):
//! `#[idempotent(key = "...")]`, `#[derive(KeyPart)]` and `#[derive(Classify)]`.
//!
//! Use them through the `idempotent-tools` crate, which re-exports both and holds
//! the runtime the expansion calls into. The attribute checks the key
//! template against the function's arguments while the crate compiles, so a
//! key that could split one ask into two actions (free text, a tool-call id)
//! or merge two asks into one (a fixed key) never builds.
//!
//! The work flows one way, over one value (`ast::Input`): `options` reads
//! the attribute's options (`values` their values), `item` parses the
//! function once and keeps its body as tokens, `params` reads the
//! parameters, `signature` checks what the function returns, `template`
//! reads the key template, `resolve` turns its placeholders into a plan of
//! the key, refusing what may not be keyed (`names` holds the names it
//! reads as wording or as a call's id), and `expand` writes the tokens.
//! `instrumented` finds the user's block under `#[tracing::instrument]`,
//! and `key_part` and `classify` are the derives.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use proc_macro::TokenStream;

mod ast;
mod classify;
mod errors;
mod expand;
mod instrumented;
mod item;
mod key_part;
mod krate;
mod names;
mod options;
mod params;
mod resolve;
mod signature;
mod suggest;
mod template;
mod values;

/// Runs an async tool's action once per ask, however many times it is
/// called.
///
/// ```
/// use idempotent_tools::{Outcome, Run, idempotent};
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
///     let _ = (run, reason);
///     // The provider is called here, once per ask.
///     Ok(Refund { order_id, usd })
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let run = Run::new("run-7")?;
/// let first = refund_order(run.clone(), "1182".into(), 42, "damaged".into()).await?;
/// let again = refund_order(run.clone(), "1182".into(), 42, "it arrived broken".into()).await?;
/// let other = refund_order(run, "1182".into(), 41, "damaged".into()).await?;
/// assert!(first.is_fresh());
/// assert!(again.is_replay());
/// assert!(other.is_conflict());
/// # Ok(()) }
/// ```
///
/// Each call builds its key from the template, fingerprints the arguments
/// that are not in the key, and claims the key before the body runs. The
/// body runs for the first ask only; a repeat gets `Outcome::Replay` with the
/// first result, and the same key asked with other arguments gets
/// `Outcome::Conflict`. The body returns `Result<T, E>`; the function returns
/// `Result<Outcome<T>, E>`.
///
/// # The key
///
/// Literal text and `<placeholder>`s. A placeholder is an argument
/// (`<order_id>`, also a name bound by a destructured argument), a field of
/// an argument or of `self` (`<args.order_id>`, `<self.tenant>`, `<pair.0>`),
/// or `<run>`: the argument named `run`, or else the run in scope
/// (`Run::scope`), or else the call fails with `Error::MissingRun` and does
/// not act. Values must implement `KeyPart`.
///
/// Refused at compile time: a placeholder that names no argument; free text
/// (`#[free_text]`, `FreeText<_>`), which the model words anew on each ask;
/// an argument or field of the ask named as the model's wording usually is
/// (`description`, `reason`, `message`, `note`, `text`, `query`, `prompt`,
/// and the like, or ending in `_reason`, `_note`, ...), in any case
/// (`Reason`, `orderNote`), unless its argument is marked `#[identifier]`;
/// the id of one call (`#[call_id]`, `CallId`, or named as the model APIs
/// and agent frameworks name it: `call_id`, `tool_call_id`, `tool_use_id`,
/// `function_call_id`, `invocation_id`, `request_id`, in any case), which
/// is new on each call, unless its argument is marked `#[identifier]`; a
/// template with no placeholder, an empty one, an unterminated or empty
/// `<>`, a placeholder used twice; two placeholders with nothing between
/// them, a literal after a placeholder without a separator character, and
/// `%` in literal text, which would make two asks render one key.
///
/// # The fingerprint
///
/// Every argument that is not in the key whole is serialized (serde) into
/// the fingerprint, except free text, call ids (by marker, type or name,
/// wherever they sit: in an `Option`, a field of an argument struct named
/// as a call id unless its argument is marked `#[identifier]`), `self` and
/// context: an
/// argument marked `#[context]` or `#[rig(context)]`, or of a framework's
/// own context type (rig's `ToolContext`; rmcp's `RequestContext`, `Peer`,
/// `Extensions`, `Extension<_>`, `RequestMetaObject`, `RequestId`,
/// `CancellationToken`, `ToolName`, `RequestState`, `InputResponses`). A
/// type of your own is part of the ask whatever its name. Destructured
/// arguments are walked, and each name they bind counts as an argument.
///
/// # Options
///
/// - `key = "..."`: the template (required);
/// - `store = <expr>`: anything `IntoStore`, evaluated on each call (it may
///   use `self`); the process default otherwise;
/// - `retention = "7d"`, `wait = "30s"`, `lease = "30s"`: durations with a
///   unit of `ms`, `s`, `m`, `h` or `d`;
/// - `record_errors`: an `Err` is final, recorded and replayed, instead of
///   releasing the claim for a retry;
/// - `takeover = "rerun" | "report_unknown"`: what a takeover from a crashed
///   holder does;
/// - `note = "..."`, `conflict_note = "..."`: what a replay or a conflict
///   tells the model;
/// - `transaction` (Postgres): the body runs in a transaction on the
///   database of the store named by `store = ...`, handed to it through the
///   argument marked `#[transaction]` (`#[transaction] tx: &Transaction<'_>`),
///   and the call's record commits in that same transaction, so the body's
///   writes and the record commit together or not at all. The marked
///   argument is taken out of the signature: callers never pass it, and it
///   is never keyed or fingerprinted. Not with `record_errors` nor
///   `takeover = "report_unknown"`. See the guide's chapter on
///   transactions;
/// - `tool = "..."`: the tool's identity in the store. Otherwise a free
///   function is `module::name`, and a method is `module::Type::name`, with
///   the type read from `Self` at run time (its own name and its generic
///   arguments' names, without their paths), so that `Tool::call` of two
///   types in one module are two tools. A tool nested in functions carries
///   their names too (`module::billing::apply`), so that an `apply` in
///   `fn billing()` and one in `fn shipping()` are two tools.
///
/// # The function
///
/// An `async fn`, free or a method (`&self`, `&mut self`, `self`), generic
/// or not. A plain `fn` is refused: the guard must await the store and any
/// identical call in flight. Only the body is rewritten; the signature and
/// every other attribute stay as written, so the attribute stacks with
/// rig's `#[rig_tool]` and goes above rmcp's `#[tool]`. Internal names are
/// hygienic, and the future is `Send` whenever the body's is.
///
/// Above rmcp's `#[tool]` (written `#[tool]` or `#[rmcp::tool]`, on a
/// method), the attribute also checks what rmcp's router needs, so that a
/// miss is reported in these words rather than as rmcp's unmet
/// `IntoToolRoute` bound: `<run>` needs a `run: Run` argument (rmcp runs
/// tools where no run scope reaches); a server whose tools take `run: Run`
/// implements `idempotent_tools::rmcp::ResolvesRuns`; the error type
/// implements rmcp's `IntoContents`; and the `rmcp` feature is on.
///
/// Every error in one function is reported at once, each at the token that
/// caused it, next to the function as written so that call sites still
/// resolve.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::idempotent(args.into(), item.into()).into()
}

/// Lets a newtype or a fieldless enum be part of an idempotency key.
///
/// A newtype (a struct with one field) writes its field: `OrderId(1182)`
/// keys as `1182`. A fieldless enum writes its variant's name, or the name
/// given with `#[key_part(rename = "...")]` on the variant. A struct of
/// several fields is refused: key on each field in the template instead
/// (`<args.a>:<args.b>`), where the separator keeps them apart.
///
/// ```
/// use idempotent_tools::{KeyPart, call::Key};
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
#[proc_macro_derive(KeyPart, attributes(key_part))]
pub fn derive_key_part(input: TokenStream) -> TokenStream {
    key_part::derive(input.into()).into()
}

/// Says, for each variant of an error enum, whether the action may have
/// taken effect before it (`idempotent_tools::Classify`).
///
/// A variant marked `#[classify(definite)]` did not take effect: the
/// claim is released, and a retry acts. One marked `#[classify(unknown)]`
/// may have: the claim is never released on it (see `verify` on
/// `#[idempotent]`). An unmarked variant with exactly one field delegates
/// to that field, which implements `Classify` (`std::io::Error`, the
/// guard's own `Error`, another derived error); a marker overrides it. An
/// unmarked variant with no field or several is refused: which it is must
/// be said.
///
/// ```
/// use idempotent_tools::{Classify, Failure};
///
/// #[derive(Debug, thiserror::Error, Classify)]
/// enum RefundError {
///     #[error("the card was declined")]
///     #[classify(definite)]
///     Declined,
///     #[error("the payment service did not answer in time")]
///     #[classify(unknown)]
///     TimedOut,
///     #[error("the payment service's connection failed")]
///     Network(#[from] std::io::Error),
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_tools::Error),
/// }
///
/// let reset = RefundError::Network(std::io::ErrorKind::ConnectionReset.into());
/// assert_eq!(reset.failure(), Failure::Unknown);
/// assert_eq!(RefundError::Declined.failure(), Failure::Definite);
/// assert_eq!(RefundError::TimedOut.failure(), Failure::Unknown);
/// ```
#[proc_macro_derive(Classify, attributes(classify))]
pub fn derive_classify(input: TokenStream) -> TokenStream {
    classify::derive(input.into()).into()
}
