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
/// - `takeover = "rerun" | "verify" | "report_unknown"`: what a takeover
///   from a crashed holder does. **Left out, it is `"rerun"`** (or
///   `"verify"` with `verify = ...`): the action runs again, which is safe
///   only where the provider deduplicates by the key the action hands it
///   (see [below](#when-the-provider-may-have-acted));
/// - `verify = path`: the async fn that asks the provider whether the
///   action happened, after a failure that may have taken effect and on a
///   takeover (see [below](#when-the-provider-may-have-acted)). Not with
///   `transaction`;
/// - `settle = "2s"`: how long the provider's lookups lag behind its
///   writes: the verification's `NotApplied` is trusted only once this long
///   has passed since the action may last have run (none by default). Only
///   with `verify`;
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
/// # When the provider may have acted
///
/// An error after the request may have reached the provider (a timeout, a
/// reset connection) does not mean the action did not happen. A tool whose
/// error type implements `Classify` (by hand, or with
/// [`#[derive(Classify)]`](macro@Classify)) says so: found while the tool
/// compiles, with nothing to write at the attribute. A definite error
/// releases the claim and a retry acts; an unknown one never does. It goes
/// to the tool's verification if it has one, or else is recorded as an
/// unknown outcome, and every later call gets `Error::UnknownOutcome` until
/// an operator resolves the key. An error type that does not implement
/// `Classify` is definite throughout: every error releases the claim.
///
/// `verify = find_refund` names an `async fn` that takes the call's `Key`,
/// then a clone of each of the tool's arguments, in order and by value
/// (`self`'s type first for a method), but free text, call ids and the
/// transaction, and answers with `Verified<T>`, `T` the tool's result:
/// `Applied(result)` (recorded, and replayed from then on), `NotApplied`
/// (acting is safe once the `settle` time has passed), `NotYet` (asked
/// again, within the call's `wait`), or `Contradicts(why)` (recorded as
/// unknown, for an operator). A function of another signature is refused
/// with the signature expected.
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// use idempotent_tools::call::Key;
/// use idempotent_tools::{Classify, Outcome, Run, Verified, idempotent};
///
/// /// A payment service that takes no idempotency key, and lists the
/// /// refunds it made by order.
/// #[derive(Default)]
/// struct Payments {
///     refunds: Mutex<Vec<(String, u64)>>,
/// }
///
/// #[derive(Debug, thiserror::Error, Classify)]
/// enum RefundError {
///     #[error("the card was declined")]
///     #[classify(definite)]
///     Declined,
///     #[error("the payment service did not answer in time")]
///     #[classify(unknown)]
///     TimedOut,
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_tools::Error),
/// }
///
/// /// Asks the payment service whether this refund was made: the key, then
/// /// the tool's arguments.
/// async fn find_refund(
///     _key: Key,
///     _run: Run,
///     order_id: String,
///     usd: u64,
///     payments: Arc<Payments>,
/// ) -> Verified<u64> {
///     let refunds = payments.refunds.lock().unwrap();
///     match refunds.iter().find(|(order, _)| *order == order_id) {
///         Some((_, made)) if *made == usd => Verified::Applied(usd),
///         Some((_, made)) => Verified::Contradicts(format!("refunded {made} instead")),
///         None => Verified::NotApplied,
///     }
/// }
///
/// #[idempotent(key = "<run>:refund:<order_id>", verify = find_refund, settle = "2s")]
/// async fn refund_order(
///     run: Run,
///     order_id: String,
///     usd: u64,
///     #[context] payments: Arc<Payments>,
/// ) -> Result<Outcome<u64>, RefundError> {
///     let _ = run;
///     if usd == 0 {
///         return Err(RefundError::Declined);
///     }
///     payments.refunds.lock().unwrap().push((order_id, usd));
///     // The refund is made, but its answer is lost on the way back.
///     Err(RefundError::TimedOut)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let payments = Arc::new(Payments::default());
/// let run = Run::new("run-7")?;
/// // The timeout may have come after the refund: the service is asked, and
/// // says it was made.
/// let first = refund_order(run.clone(), "1182".into(), 42, payments.clone()).await?;
/// assert_eq!(first.value(), Some(&42));
/// // A retry replays it, and refunds nothing.
/// let again = refund_order(run, "1182".into(), 42, payments.clone()).await?;
/// assert!(again.is_replay());
/// assert_eq!(payments.refunds.lock().unwrap().len(), 1);
/// # Ok(()) }
/// ```
///
/// **A takeover reruns the action unless the tool says otherwise.** When
/// a holder stops mid-action (a crash, a lost host) and its lease runs
/// out, the next call takes the claim over. Nothing recorded says whether
/// the provider acted, and `takeover` decides:
///
/// - `"rerun"`, the default without `verify`: the action runs again. Safe
///   where the provider deduplicates by the key the action hands it
///   (`current_key()`, as payment APIs take an idempotency key); where it
///   does not, a holder that crashed after the provider acted has its
///   action done twice. A tool whose provider takes no key should name
///   `verify` or `takeover = "report_unknown"`;
/// - `"verify"`, the default with `verify`: the verification is asked, as
///   after an unknown error;
/// - `"report_unknown"`: the action is not run; the outcome is recorded as
///   unknown, for an operator.
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
/// On a tool's error type, the `#[idempotent]` attribute finds it while the
/// tool compiles: an unknown failure never releases the claim (see [When
/// the provider may have acted](macro@idempotent#when-the-provider-may-have-acted)).
/// A type that classifies needs `Display`: its text is recorded with the
/// unknown outcome, for the operator.
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
