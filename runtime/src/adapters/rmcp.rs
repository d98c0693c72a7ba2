//! rmcp (the Rust MCP SDK, 3.11): outcomes as tool results, the run from
//! the request, and errors the client can read.
//!
//! rmcp runs each `tools/call` request on a task of its own, so a
//! [`Run::scope`] entered around the server never reaches a tool. The run
//! comes with the request instead:
//!
//! - a tool method takes `run: Run` as a parameter, and `<run>` in its key
//!   reads it. rmcp fills it like any extractor: from the request's `_meta`
//!   under [`RUN_META_KEY`] (the client names its agent run), else from a
//!   `Run` in the request's extensions (an HTTP layer put it there);
//! - or the key names a field of the server, such as `<self.session>`, for a
//!   server instance made per client session.
//!
//! An [`Outcome`] is a tool result, never an error: a replay reaches the
//! client as the first result, then the note, in
//! [`CallToolResult::content`], with `is_error` false.

use ::rmcp::ErrorData;
use ::rmcp::RoleServer;
use ::rmcp::handler::server::common::FromContextPart;
use ::rmcp::handler::server::tool::{IntoCallToolResult, ToolCallContext};
use ::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, IntoContents,
    MetaObject, RequestMetaObject,
};
use ::rmcp::service::RequestContext;
use serde::Serialize;

use crate::error::Error;
use crate::outcome::Outcome;
use crate::run::Run;

/// The `_meta` key under which a client names the run of a `tools/call`
/// request: `{"_meta": {"idempotent/run": "run-7"}}`.
pub const RUN_META_KEY: &str = "idempotent/run";

/// The `_meta` key of a tool result that says what the guard did: `fresh`,
/// `replay` or `conflict`. For clients and logs; the model reads the note.
pub const STATUS_META_KEY: &str = "idempotent/status";

/// The run a request belongs to: its `_meta` [`RUN_META_KEY`], else a
/// [`Run`] in its extensions.
///
/// Fails with `invalid_params` when there is neither, so a tool never acts
/// under a key that could merge two runs' actions.
pub fn run_of(context: &RequestContext<RoleServer>) -> Result<Run, ErrorData> {
    if let Some(value) = context.meta.get(RUN_META_KEY) {
        return value
            .as_str()
            .and_then(|text| Run::new(text).ok())
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("`_meta.{RUN_META_KEY}` must be a non-empty string naming the run"),
                    None,
                )
            });
    }
    if let Some(run) = context.extensions.get::<Run>() {
        return Ok(run.clone());
    }
    Err(ErrorData::invalid_params(
        format!(
            "this tool acts once per run, and the request names no run: send \
             `_meta: {{\"{RUN_META_KEY}\": \"<run id>\"}}` with `tools/call`; nothing was done"
        ),
        None,
    ))
}

/// Names `run` in a `tools/call` request's `_meta`, for a client written
/// with rmcp: the server's `run: Run` parameter reads it.
///
/// ```
/// use idempotent_runtime::{Run, rmcp::{RUN_META_KEY, with_run}};
/// use rmcp::model::CallToolRequestParams;
///
/// let params = with_run(CallToolRequestParams::new("refund_order"), &Run::new("run-7")?);
/// let meta = params.meta.as_ref().and_then(|meta| meta.get(RUN_META_KEY));
/// assert_eq!(meta, Some(&serde_json::json!("run-7")));
/// # Ok::<(), idempotent_runtime::Error>(())
/// ```
pub fn with_run(mut params: CallToolRequestParams, run: &Run) -> CallToolRequestParams {
    params
        .meta
        .get_or_insert_with(RequestMetaObject::new)
        .insert(RUN_META_KEY.into(), run.as_str().into());
    params
}

/// `run: Run` as a tool method's parameter, filled by [`run_of`].
impl<S> FromContextPart<ToolCallContext<'_, S>> for Run {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        run_of(context.request_context())
    }
}

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
/// use idempotent_runtime::Outcome;
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
            Error::MissingRun | Error::EmptyRun | Error::Key(_) => {
                ErrorData::invalid_params(err.to_string(), None)
            }
            other => ErrorData::internal_error(other.to_string(), None),
        }
    }
}
