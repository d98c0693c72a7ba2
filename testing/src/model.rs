//! A scripted model: the tool calls it makes, step by step, and its answer.

use std::collections::VecDeque;

use serde_json::Value;

use idempotent_tools::CallId;

/// One tool call the model makes: an id, the tool's name and its JSON
/// arguments, as a framework hands them to a tool.
///
/// ```
/// use idempotent_tools_testing::ToolCall;
/// use serde_json::json;
///
/// let call = ToolCall::new("call_a", "refund_order", json!({ "order_id": "1182", "usd": 42 }));
/// assert_eq!(call.id.as_str(), "call_a");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id: new for every call, so never an idempotency key.
    pub id: CallId,
    /// The tool's name.
    pub tool: String,
    /// The arguments, as the model wrote them.
    pub args: Value,
}

impl ToolCall {
    /// A call of `tool` with `args`, under the id `id`.
    pub fn new(id: impl Into<String>, tool: impl Into<String>, args: Value) -> ToolCall {
        ToolCall {
            id: CallId::new(id),
            tool: tool.into(),
            args,
        }
    }

    /// The same ask under another call id: what a model that repeats itself
    /// sends.
    pub fn with_id(&self, id: impl Into<String>) -> ToolCall {
        ToolCall {
            id: CallId::new(id),
            ..self.clone()
        }
    }
}

/// One step of the script.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// These calls, all at once.
    Calls(Vec<ToolCall>),
    /// Every call of the previous step that failed, again, each under the
    /// old id with `_retry` appended: what a model does after reading an
    /// error.
    RetryFailed,
}

/// What the model answers to one turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// Tool calls to run at once; their results come back on the next turn.
    Calls(Vec<ToolCall>),
    /// The final answer: the run ends.
    Text(String),
}

/// A model that follows a script, so a test can send a tool exactly the
/// duplicates it wants to see handled, with no model and no API key.
///
/// A script is a list of steps, each a list of tool calls made at once, and
/// it ends in text. The model is handed each step's results before it takes
/// the next (the runner's [`Transcript`](super::Transcript) keeps them), and
/// a [`retry_failed`](ScriptedModel::retry_failed) step reacts to them the
/// way a model that reads an error does.
///
/// ```
/// use idempotent_tools_testing::{ScriptedModel, ToolCall};
/// use serde_json::json;
///
/// // The same refund twice in one step, under two call ids, then an answer.
/// let ask = ToolCall::new("call_a", "refund_order", json!({ "order_id": "1182", "usd": 42 }));
/// let model = ScriptedModel::new()
///     .step([ask.clone(), ask.with_id("call_b")])
///     .answer("Refunded order 1182.");
/// # let _ = model;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedModel {
    script: VecDeque<Step>,
    answer: String,
}

impl ScriptedModel {
    /// A model with an empty script: it answers with empty text at once.
    pub fn new() -> ScriptedModel {
        ScriptedModel::default()
    }

    /// Appends a step that makes `calls`, all at once.
    pub fn step(mut self, calls: impl IntoIterator<Item = ToolCall>) -> ScriptedModel {
        self.script
            .push_back(Step::Calls(calls.into_iter().collect()));
        self
    }

    /// Appends a step that calls again, each under a new id (the old one with
    /// `_retry` appended), every call of the previous step that came back as
    /// an error. If none failed, the step is skipped.
    pub fn retry_failed(mut self) -> ScriptedModel {
        self.script.push_back(Step::RetryFailed);
        self
    }

    /// Sets the text the model answers with once the script is done.
    pub fn answer(mut self, text: impl Into<String>) -> ScriptedModel {
        self.answer = text.into();
        self
    }

    /// The model's next turn, given the results of its previous one (empty
    /// on the first turn).
    pub fn next_turn(&mut self, results: &[ToolResult]) -> Turn {
        while let Some(step) = self.script.pop_front() {
            let calls = match step {
                Step::Calls(calls) => calls,
                Step::RetryFailed => results
                    .iter()
                    .filter(|result| result.output.is_err())
                    .map(|result| ToolCall {
                        id: CallId::new(format!("{}_retry", result.call.id)),
                        ..result.call.clone()
                    })
                    .collect(),
            };
            if !calls.is_empty() {
                return Turn::Calls(calls);
            }
        }
        Turn::Text(self.answer.clone())
    }
}

/// One tool call and what came back: the call, and the result the model
/// was handed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The call.
    pub call: ToolCall,
    /// The tool's result as JSON, or the error text the model read instead.
    pub output: Result<Value, String>,
}

impl ToolResult {
    /// What the model reads: the result, or `{"error": "..."}`.
    pub fn seen_by_model(&self) -> Value {
        match &self.output {
            Ok(value) => value.clone(),
            Err(error) => serde_json::json!({ "error": error }),
        }
    }

    /// The `status` of a guarded tool's [`Outcome`](idempotent_tools::Outcome):
    /// `fresh`, `replay` or `conflict`. `None` for an error or a tool that
    /// returns something else.
    pub fn status(&self) -> Option<&str> {
        self.output.as_ref().ok()?.get("status")?.as_str()
    }

    /// The note a replay or a conflict carried to the model.
    pub fn note(&self) -> Option<&str> {
        self.output.as_ref().ok()?.get("note")?.as_str()
    }
}
