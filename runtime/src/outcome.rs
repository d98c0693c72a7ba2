//! What a guarded call returns: a fresh result, a replay, or a conflict.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// The note a replay carries when the tool sets none.
pub const DEFAULT_REPLAY_NOTE: &str = "This action was already carried out for this request; the result above is the original one. \
     Nothing new was done, and nothing more is needed.";

/// The note a conflict on arguments carries when the tool sets none.
pub const DEFAULT_CONFLICT_NOTE: &str = "This action was already asked for with different details, and the first request stands; \
     nothing new was done. If a second, separate action is really wanted, ask the user.";

/// The note a conflict with another tool carries.
pub const OTHER_TOOL_NOTE: &str =
    "Another tool already used this key for its own action; nothing was done.";

/// What a guarded call returns.
///
/// A caller can tell the three cases apart, and a tool can hand any of them
/// straight to the model: it serializes with a `status` and, for repeats, a
/// plain `note`, so the model reads "already done" instead of an error it
/// might retry with other arguments.
///
/// ```
/// use idempotent_tools::Outcome;
///
/// let replay = Outcome::Replay { value: 42, note: "already refunded".into() };
/// assert_eq!(
///     serde_json::to_string(&replay)?,
///     r#"{"status":"replay","value":42,"note":"already refunded"}"#
/// );
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// With the `rmcp` feature it has a JSON schema, so an MCP server can
/// declare it as a tool's structured output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "rmcp", derive(schemars::JsonSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
#[must_use = "an outcome says whether the action ran now, ran before, or conflicts; hand it to the model or check it"]
pub enum Outcome<T> {
    /// The action ran now, and this is its result.
    Fresh {
        /// The action's result.
        value: T,
    },
    /// The action had already run under this key: this is its recorded
    /// result, exactly as first returned. Nothing ran now.
    Replay {
        /// The first call's result.
        value: T,
        /// A short line for the model saying it was already done.
        note: Cow<'static, str>,
    },
    /// The key was used before for a different request: other arguments, or
    /// another tool. Nothing ran now.
    Conflict {
        /// The first request's result, when it was completed and came from this
        /// tool. Never another tool's result.
        first: Option<T>,
        /// What differed.
        reason: ConflictReason,
        /// A short line for the model saying what was already done.
        note: Cow<'static, str>,
    },
}

/// Why a key's earlier use conflicts with this call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "rmcp", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConflictReason {
    /// Same key, same tool, different arguments (refund 42, then 41).
    Arguments,
    /// Same key text from another tool.
    OtherTool,
}

impl<T> Outcome<T> {
    /// The result, fresh or replayed, or a conflict's first result.
    pub fn value(&self) -> Option<&T> {
        match self {
            Outcome::Fresh { value } | Outcome::Replay { value, .. } => Some(value),
            Outcome::Conflict { first, .. } => first.as_ref(),
        }
    }

    /// Takes the result, fresh or replayed, or a conflict's first result.
    pub fn into_value(self) -> Option<T> {
        match self {
            Outcome::Fresh { value } | Outcome::Replay { value, .. } => Some(value),
            Outcome::Conflict { first, .. } => first,
        }
    }

    /// Whether the action ran in this call.
    pub fn is_fresh(&self) -> bool {
        matches!(self, Outcome::Fresh { .. })
    }

    /// Whether this is an earlier call's result.
    pub fn is_replay(&self) -> bool {
        matches!(self, Outcome::Replay { .. })
    }

    /// Whether the key was used before for a different request.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Outcome::Conflict { .. })
    }

    /// The note for the model, on a replay or a conflict.
    pub fn note(&self) -> Option<&str> {
        match self {
            Outcome::Fresh { .. } => None,
            Outcome::Replay { note, .. } | Outcome::Conflict { note, .. } => Some(note),
        }
    }

    /// Maps the result, keeping the status and note.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Fresh { value } => Outcome::Fresh { value: f(value) },
            Outcome::Replay { value, note } => Outcome::Replay {
                value: f(value),
                note,
            },
            Outcome::Conflict {
                first,
                reason,
                note,
            } => Outcome::Conflict {
                first: first.map(f),
                reason,
                note,
            },
        }
    }
}

/// A tool's success type that a guarded call can produce from an
/// [`Outcome`].
///
/// `#[idempotent]` reads the tool's return type `Result<O, E>`: the body
/// returns `Result<O::Value, E>`, and the guard wraps the value. Implemented
/// for [`Outcome<T>`] itself; framework adapters add their own wrappers.
#[diagnostic::on_unimplemented(
    message = "a guarded tool returns `Result<Outcome<T>, E>`, not `Result<{Self}, E>`",
    label = "write `Outcome<{Self}>` here",
    note = "`Outcome` tells the caller a fresh result from a replay or a conflict, and carries the note the model reads on a repeat",
    note = "the body still returns `Ok(value)`; the guard wraps it"
)]
pub trait ToolOutput: Sized {
    /// What the tool's body produces.
    type Value;
    /// Wraps an outcome.
    fn from_outcome(outcome: Outcome<Self::Value>) -> Self;
}

impl<T> ToolOutput for Outcome<T> {
    type Value = T;
    fn from_outcome(outcome: Outcome<T>) -> Self {
        outcome
    }
}

#[cfg(all(test, feature = "rmcp"))]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_has_a_schema_with_its_status_and_note() {
        let schema = serde_json::to_string(&schemars::schema_for!(Outcome<u64>)).expect("json");
        for part in [
            "status", "fresh", "replay", "conflict", "note", "first", "reason",
        ] {
            assert!(schema.contains(part), "{part} missing from {schema}");
        }
    }
}
