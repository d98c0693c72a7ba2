//! What `#[idempotent]` expands into. Not a public API: it may change in any
//! release.
//!
//! Each bound the expansion needs is a trait of its own here, with a message
//! that says what a guarded tool needs and why. The expansion names these
//! traits at the user's return type, argument type or key string, so a wrong
//! type gets one error that teaches, at the token that caused it.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::guard::Call;
use crate::key::KeyPart;
use crate::outcome::ToolOutput;

/// The return type of a guarded tool: `Result<O, E>` with `O: ToolOutput`.
#[diagnostic::on_unimplemented(
    message = "`#[idempotent]` needs the tool to return `Result<O, E>` with `O: ToolOutput`, such as `Result<Outcome<T>, E>`, not `{Self}`",
    label = "this return type gives the guard no way to tell a replay from a fresh result",
    note = "the body returns `Result<T, E>`; the guard wraps `T` in `Outcome` (fresh, replay or conflict), releases the claim when the body returns `Err`, and reports a store failure through `E`",
    note = "write `-> Result<Outcome<Refund>, PayError>` and let the body return `Ok(refund)`"
)]
pub trait ToolResult: Sized {
    /// What the tool returns on success.
    type Output: ToolOutput;
    /// The tool's error.
    type Error;
    /// Builds the return value.
    fn from_result(result: Result<Self::Output, Self::Error>) -> Self;
}

impl<O: ToolOutput, E> ToolResult for Result<O, E> {
    type Output = O;
    type Error = E;
    fn from_result(result: Result<O, E>) -> Self {
        result
    }
}

/// What the body of a tool returning `R` produces.
pub type Value<R> = <<R as ToolResult>::Output as ToolOutput>::Value;

/// A tool's error type that can carry the guard's own errors.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry the errors of `#[idempotent]`: it does not implement `From<idempotent::Error>`",
    label = "the tool's error type must take `idempotent::Error`",
    note = "the guard reports through the tool's own error type when the store fails, when the key names `<run>` and no run is in scope, or when an identical call is still running past the wait deadline; the action is not run in each case",
    note = "add a variant such as `#[error(transparent)] Idempotency(#[from] idempotent::Error)`, or implement `From<idempotent::Error>`"
)]
pub trait GuardError: From<Error> {}

impl<E: From<Error>> GuardError for E {}

/// A tool's result, which the guard records for replays.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be recorded as the result of an idempotent tool",
    label = "the result of this tool is stored and replayed",
    note = "a duplicate call gets the first call's result back, so the result is recorded: it needs `Serialize`, `Deserialize`, `Clone`, `Send`, `Sync` and `'static`",
    note = "derive `Clone`, `serde::Serialize` and `serde::Deserialize` for it, and own its data (no borrowed fields)"
)]
pub trait Recordable: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}

impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Recordable for T {}

/// A tool's error, recorded as final under `record_errors`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be recorded as a final error, which `record_errors` asks for",
    label = "with `record_errors`, this error is stored and replayed",
    note = "with `record_errors`, the first call's error is recorded and every duplicate gets it back: it needs `Serialize`, `Deserialize`, `Clone`, `Send`, `Sync` and `'static`, and `From<idempotent::Error>`",
    note = "or leave out `record_errors`: an error then releases the claim, and a retry runs the action again"
)]
pub trait RecordableError: GuardError + Recordable {}

impl<E: GuardError + Recordable> RecordableError for E {}

/// An argument that is fingerprinted.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be fingerprinted",
    label = "this argument is not in the key, so it is fingerprinted",
    note = "every argument that is not in the key is fingerprinted with serde, so that the same key asked with other arguments (refund 42, then 41, on one order) is a conflict, never a replay",
    note = "derive `serde::Serialize` for it; or, if it is no part of the ask, mark it `#[context]` (what the framework hands the tool) or `#[free_text]` (wording the model chooses), which leaves it out"
)]
pub trait Fingerprinted: Serialize {}

impl<T: Serialize + ?Sized> Fingerprinted for T {}

/// Checks at the key string that a placeholder's value may enter a key.
pub fn key_part<P: KeyPart + ?Sized>(part: &P) -> &P {
    part
}

/// Checks at an argument's type that it can be fingerprinted.
pub fn fingerprinted<T: Fingerprinted + ?Sized>(value: &T) -> &T {
    value
}

/// The tool's return value when the key or fingerprint could not be built:
/// the guard's error, through the tool's error type. The action did not run.
pub fn fail<R>(error: Error) -> R
where
    R: ToolResult,
    R::Error: GuardError,
{
    R::from_result(Err(error.into()))
}

/// Runs the body under the guard, and wraps the outcome in the tool's
/// return type. Naming `R` pins the body's type to `Result<Value<R>, E>`,
/// so `?` and `return` in the body infer.
pub async fn run<R, F>(call: Call, body: F) -> R
where
    R: ToolResult,
    R::Error: GuardError,
    Value<R>: Recordable,
    F: Future<Output = Result<Value<R>, R::Error>>,
{
    R::from_result(call.run(body).await.map(ToolOutput::from_outcome))
}

/// [`run`] with final errors recorded (`record_errors`).
pub async fn run_recording_errors<R, F>(call: Call, body: F) -> R
where
    R: ToolResult,
    R::Error: RecordableError,
    Value<R>: Recordable,
    F: Future<Output = Result<Value<R>, R::Error>>,
{
    R::from_result(
        call.run_recording_errors(body)
            .await
            .map(ToolOutput::from_outcome),
    )
}
