//! A guarded tool's outcome and errors as MCP results.

use ::rmcp::ErrorData;
use ::rmcp::handler::server::tool::IntoCallToolResult;
use ::rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, IntoContents, MetaObject};
use serde::Serialize;

use super::STATUS_META_KEY;
use crate::error::Error;
use crate::outcome::Outcome;

/// The model-facing text of a value: a string as it is, anything else as
/// JSON.
fn value_block<T: Serialize>(value: &T) -> Result<ContentBlock, ErrorData> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => Ok(ContentBlock::text(text)),
        Ok(other) => Ok(ContentBlock::text(other.to_string())),
        Err(err) => Err(ErrorData::internal_error(
            format!("the tool's result could not be serialized: {err}"),
            None,
        )),
    }
}

/// A guarded tool's outcome as an MCP tool result.
///
/// - fresh: the value;
/// - replay: the first call's value, then the note saying it was already
///   done;
/// - conflict: the first call's value when there is one, then the note.
///
/// None of them is an error (`is_error` is false): a model that reads an
/// error may try again with other arguments. The result's `_meta` carries
/// [`STATUS_META_KEY`].
///
/// ```
/// use idempotent_tools::Outcome;
/// use rmcp::handler::server::tool::IntoCallToolResult;
/// use rmcp::model::{CallToolResponse, ContentBlock};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let replay = Outcome::Replay { value: "re_1".to_string(), note: "already refunded".into() };
/// let CallToolResponse::Complete(result) = replay.into_call_tool_result()? else {
///     return Err("a tool call completes".into());
/// };
/// assert_eq!(result.is_error, Some(false));
/// assert_eq!(result.content, [ContentBlock::text("re_1"), ContentBlock::text("already refunded")]);
/// # Ok(()) }
/// ```
impl<T: Serialize> IntoCallToolResult for Outcome<T> {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        let (status, value, note) = match &self {
            Outcome::Fresh { value } => ("fresh", Some(value), None),
            Outcome::Replay { value, note } => ("replay", Some(value), Some(note)),
            Outcome::Conflict { first, note, .. } => ("conflict", first.as_ref(), Some(note)),
        };
        let mut content = Vec::with_capacity(2);
        if let Some(value) = value {
            content.push(value_block(value)?);
        }
        if let Some(note) = note {
            content.push(ContentBlock::text(note.as_ref()));
        }
        let mut meta = MetaObject::new();
        meta.insert(STATUS_META_KEY.into(), status.into());
        let mut result = CallToolResult::success(content);
        result.meta = Some(meta);
        Ok(result.into())
    }
}

/// A guard error as an MCP tool-level error (`is_error: true`), whose text
/// the model reads: "still in progress", "outcome unknown", and so on.
impl IntoContents for Error {
    fn into_contents(self) -> Vec<ContentBlock> {
        vec![ContentBlock::text(self.to_string())]
    }
}

/// A guard error as a JSON-RPC error, for tools whose error type is rmcp's
/// [`ErrorData`]. A missing or bad run or key is the request's fault
/// (`invalid_params`); the rest are the server's (`internal_error`).
impl From<Error> for ErrorData {
    fn from(err: Error) -> ErrorData {
        match err {
            Error::MissingRun | Error::Run(_) | Error::Key(_) => {
                ErrorData::invalid_params(err.to_string(), None)
            }
            other => ErrorData::internal_error(other.to_string(), None),
        }
    }
}
