//! What `#[idempotent]` expands into. Not a public API: it may change in any
//! release.

use std::future::Future;

pub use serde::Serialize;

use crate::error::Error;
use crate::key::KeyPart;
use crate::outcome::ToolOutput;

/// Pins the body's output type to `Result<O::Value, E>`, so that `?` and
/// `return` in the body infer.
pub fn body<O, E, F>(fut: F) -> F
where
    O: ToolOutput,
    F: Future<Output = Result<O::Value, E>>,
{
    fut
}

/// Turns a guarded call's result into the tool's declared return type.
pub fn output<O: ToolOutput, E>(
    result: Result<crate::Outcome<O::Value>, E>,
) -> Result<O, E> {
    result.map(O::from_outcome)
}

/// Checks at the span of a key placeholder that its value may enter a key.
pub fn key_part<P: KeyPart + ?Sized>(part: &P) -> &P {
    part
}

/// Checks at the span of an argument that it can be fingerprinted.
pub fn fingerprinted<T: Serialize + ?Sized>(value: &T) -> &T {
    value
}

/// Checks at the span of the return type that the tool's error can carry the
/// guard's errors.
pub fn error_from<E: From<Error>>() {}
