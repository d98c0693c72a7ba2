//! What `#[idempotent]` expands into. Not a public API: it may change in any
//! release.
//!
//! The crate names this module `__private0_1`, after the release whose macro
//! expands into it, as thiserror does: a macro crate of another release
//! names another module, so a mismatched pair fails to compile instead of
//! calling functions whose meaning has changed.
//!
//! Each bound the expansion needs is a trait of its own here, with a message
//! that says what a guarded tool needs and why. The expansion names these
//! traits at the user's return type, argument type or key string, so a wrong
//! type gets one error that teaches, at the token that caused it.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::guard;
use crate::key::{self, KeyPart};
use crate::outcome::{Outcome, ToolOutput};

mod classify;
mod method_tool;
mod prepare;
pub mod rmcp;
mod site;
pub mod transaction;

pub use classify::{
    Arguments, Classified, Definite, DefiniteErrors, Errors, Unknowns, Verification, verified,
};
pub use method_tool::{MethodTool, type_identity};
pub use prepare::{Arg, FingerprintArg, Piece, Prepared, Tool, note, prepare, prepare_with, store};

/// The return type of a guarded tool: `Result<O, E>`, where `O` is a
/// [`ToolOutput`] whose value can be recorded and `E` carries the guard's
/// errors. Every bound sits on the one impl, so that a tool's type that
/// misses one gets one error, at its return type.
#[diagnostic::on_unimplemented(
    message = "`#[idempotent]` needs the tool to return `Result<O, E>` with `O: ToolOutput`, such as `Result<Outcome<T>, E>`, not `{Self}`",
    label = "this return type gives the guard no way to tell a replay from a fresh result",
    note = "the body returns `Result<T, E>`; the guard wraps `T` in `Outcome` (fresh, replay or conflict), releases the claim when the body returns `Err`, and reports a store failure through `E`",
    note = "write `-> Result<Outcome<Refund>, PayError>` and let the body return `Ok(refund)`"
)]
pub trait GuardedReturn: Sized {
    /// What the tool returns on success.
    type Output: ToolOutput<Value = Self::Value>;
    /// What the body produces, and the guard records.
    type Value: Recordable;
    /// The tool's error.
    type Error: GuardError;
    /// Builds the return value.
    fn from_result(result: Result<Self::Output, Self::Error>) -> Self;
}

impl<O, E> GuardedReturn for Result<O, E>
where
    O: ToolOutput,
    O::Value: Recordable,
    E: GuardError,
{
    type Output = O;
    type Value = O::Value;
    type Error = E;
    fn from_result(result: Result<O, E>) -> Self {
        result
    }
}

/// The shape of a tool's return type, without the guard's bounds: what a
/// refused function's body is still checked against.
pub trait Returns: Sized {
    /// What the tool returns on success.
    type Output: ToolOutput;
    /// The tool's error.
    type Error;
    /// Builds the return value.
    fn from_result(result: Result<Self::Output, Self::Error>) -> Self;
}

impl<O: ToolOutput, E> Returns for Result<O, E> {
    type Output = O;
    type Error = E;
    fn from_result(result: Result<O, E>) -> Self {
        result
    }
}

/// A tool's error type that can carry the guard's own errors.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry the errors of `#[idempotent]`: it does not implement `From<idempotent_tools::Error>`",
    label = "the tool's error type must take `idempotent_tools::Error`",
    note = "the guard reports through the tool's own error type when the store fails, when the key names `<run>` and no run is in scope, or when an identical call is still running past the wait deadline; the action is not run in each case",
    note = "add a variant such as `#[error(transparent)] Idempotency(#[from] idempotent_tools::Error)`, or implement `From<idempotent_tools::Error>`"
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
    note = "with `record_errors`, the first call's error is recorded and every duplicate gets it back: it needs `Serialize`, `Deserialize`, `Clone`, `Send`, `Sync` and `'static`",
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

/// Whether literal text separates the key parts around it: the rule the
/// attribute's template check must agree with, exposed for its tests.
pub fn separates(text: &str) -> bool {
    key::separates(text)
}

/// Checks at the key string that a placeholder's value may enter a key,
/// and hands it to [`prepare()`] as the template's piece `name`.
pub fn key_part<'a, P: KeyPart>(name: &'static str, part: &'a P) -> Piece<'a> {
    Piece::Part(name, part)
}

/// Checks at an argument's type that it can be fingerprinted, and hands
/// it to [`prepare()`] as the argument `name`.
pub fn fingerprinted<'a, T: Fingerprinted>(name: &'static str, value: &'a T) -> Arg<'a> {
    Arg {
        name,
        value,
        vouched: false,
    }
}

/// An argument marked `#[identifier]`: the user vouches that the names under
/// it name ids, so a field named `request_id` is part of the ask and is
/// fingerprinted.
pub fn vouched(arg: Arg<'_>) -> Arg<'_> {
    Arg {
        vouched: true,
        ..arg
    }
}

/// Runs the body under the guard. `call` is the prepared call, or why it
/// could not be prepared (no run in scope, an empty key part): then the body
/// is not run and the error is returned through the tool's error type.
///
/// Naming `R` pins the body's type to `Result<R::Value, R::Error>`, so `?`
/// and `return` in the body infer. The future resolves to the tool's own
/// return type, so a tool awaits one call and checks no conversion of its
/// own: what each tool makes the compiler check is this signature.
///
/// `errors` is [`Classified`] when the tool's error implements
/// [`Classify`](crate::Classify), found while the tool compiles (see
/// [`Errors`]): an unknown failure then never releases the claim, as with
/// [`Call::run_classified`](crate::call::Call::run_classified). Otherwise
/// it is [`Definite`], and the call is driven as
/// [`Call::run`](crate::call::Call::run) drives it.
///
/// `errors` comes before `body`, so that its type is known before the body
/// is checked.
#[inline]
pub fn run<R, U, F>(call: Prepared, errors: U, body: F) -> impl Future<Output = R>
where
    R: GuardedReturn,
    F: Future<Output = Result<R::Value, R::Error>>,
    U: Unknowns<R::Error>,
{
    Returning::<_, R>::new(guard::drive_classified(
        call.into_call::<F>(),
        body,
        None,
        errors.unknown(),
    ))
}

/// [`run`] with final errors recorded (`record_errors`).
#[inline]
pub fn run_recording_errors<R, F>(call: Prepared, body: F) -> impl Future<Output = R>
where
    R: GuardedReturn,
    R::Error: RecordableError,
    F: Future<Output = Result<R::Value, R::Error>>,
{
    Returning::<_, R>::new(guard::drive(
        call.into_call::<F>(),
        body,
        Some(guard::ErrorCodec::recording()),
    ))
}

/// Wraps the guard's outcome in the tool's return type.
pub fn wrap<R: GuardedReturn>(result: Result<Outcome<R::Value>, R::Error>) -> R {
    R::from_result(result.map(ToolOutput::from_outcome))
}

pin_project_lite::pin_project! {
    /// The guard's future, resolving to the tool's return type `R`.
    struct Returning<G, R> {
        #[pin]
        guarded: G,
        returns: PhantomData<fn() -> R>,
    }
}

impl<G, R> Returning<G, R> {
    fn new(guarded: G) -> Returning<G, R> {
        Returning {
            guarded,
            returns: PhantomData,
        }
    }
}

impl<G, R> Future for Returning<G, R>
where
    G: Future<Output = Result<Outcome<R::Value>, R::Error>>,
    R: GuardedReturn,
{
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        self.project().guarded.poll(cx).map(wrap::<R>)
    }
}

/// Stands in for [`run`] next to the `compile_error!`s of an attribute that
/// was refused: the body is still checked against the tool's types, so it
/// gets its own errors and no others, and call sites still resolve. The
/// crate does not build, so this never runs.
pub async fn unguarded<R, F>(body: F) -> R
where
    R: Returns,
    F: Future<Output = Result<<R::Output as ToolOutput>::Value, R::Error>>,
{
    R::from_result(
        body.await
            .map(|value| ToolOutput::from_outcome(Outcome::Fresh { value })),
    )
}

/// [`unguarded`] for a refused function that is not `async`.
pub fn unguarded_sync<R, F>(body: F) -> R
where
    R: Returns,
    F: FnOnce() -> Result<<R::Output as ToolOutput>::Value, R::Error>,
{
    R::from_result(body().map(|value| ToolOutput::from_outcome(Outcome::Fresh { value })))
}
