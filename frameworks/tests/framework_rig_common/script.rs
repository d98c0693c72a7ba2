//! Scripts for rig's scripted model, a driver that runs one prompt, and
//! what the model was shown.

use idempotent_tools::Run;
use idempotent_tools::rig::context;
use rig_agent::Agent;
use rig_agent::test_utils::{MockCompletionModel, MockTurn};
use rig_core::completion::{AssistantContent, Message};
use rig_core::message::{ToolName, ToolResult, UserContent};
use serde_json::{Value, json};

fn refund_call(call_id: &str, order_id: &str, reason: &str) -> AssistantContent {
    let name = ToolName::new("refund").unwrap_or_else(|e| panic!("tool name: {e}"));
    AssistantContent::tool_call(
        call_id,
        name,
        json!({ "order_id": order_id, "usd": 42, "reason": reason }),
    )
}

/// Two identical refunds in one step under two ids (worded differently),
/// then the same refund in a later step, then an answer.
pub fn duplicates(order_id: &str) -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::from_contents([
            refund_call("call_1", order_id, "customer asked"),
            refund_call("call_2", order_id, "the customer asked for a refund"),
        ]),
        MockTurn::from_contents([refund_call("call_3", order_id, "refund it")]),
        MockTurn::text("Refunded."),
    ])
}

/// A refund whose reply is lost, the model's retry, then an answer.
pub fn retry_after_failure(order_id: &str) -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::from_contents([refund_call("call_1", order_id, "customer asked")]),
        MockTurn::from_contents([refund_call("call_2", order_id, "retrying")]),
        MockTurn::text("Refunded."),
    ])
}

/// Runs one prompt with the run in its tool context, two tools at a time,
/// and returns every tool result in call order.
pub async fn run_prompt(agent: &Agent, run: &str) -> Vec<ToolResult> {
    let run = Run::new(run).unwrap_or_else(|e| panic!("run: {e}"));
    let response = agent
        .prompt("Refund the order.")
        .tool_context(context(&run))
        .tool_concurrency(2)
        .max_turns(6)
        .await
        .unwrap_or_else(|e| panic!("the run failed: {e}"));
    tool_results(&response.messages)
}

pub fn tool_results(messages: &[Message]) -> Vec<ToolResult> {
    messages
        .iter()
        .flat_map(|message| match message {
            Message::User { content } => content
                .iter()
                .filter_map(|c| match c {
                    UserContent::ToolResult(result) => Some(result.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// The JSON a tool result showed the model.
pub fn shown(result: &ToolResult) -> Value {
    serde_json::to_value(&result.content).unwrap_or_else(|e| panic!("tool result: {e}"))
}

pub fn status(result: &ToolResult) -> Option<String> {
    shown(result)[0]["value"]["status"]
        .as_str()
        .map(str::to_owned)
}

/// Asserts the duplicates script's results: one fresh, then replays that
/// carry the first refund and a note, none of them an error.
pub fn assert_one_fresh_then_replays(results: &[ToolResult]) {
    assert_eq!(results.len(), 3, "one result per call");
    let statuses: Vec<_> = results.iter().map(status).collect();
    let fresh = statuses
        .iter()
        .filter(|s| s.as_deref() == Some("fresh"))
        .count();
    let replays = statuses
        .iter()
        .filter(|s| s.as_deref() == Some("replay"))
        .count();
    assert_eq!((fresh, replays), (1, 2), "statuses: {statuses:?}");
    let first_id = shown(&results[0])[0]["value"]["value"]["id"].clone();
    assert!(first_id.is_string(), "the first result names its refund");
    for result in results {
        assert!(
            !result.is_error,
            "a repeat must not reach the model as an error"
        );
        assert_eq!(
            shown(result)[0]["value"]["value"]["id"],
            first_id,
            "every call sees the one refund"
        );
    }
    let replay = results
        .iter()
        .find(|r| status(r).as_deref() == Some("replay"));
    let note = replay.map(|r| shown(r)[0]["value"]["note"].clone());
    assert_eq!(
        note,
        Some(json!(idempotent_tools::call::DEFAULT_REPLAY_NOTE))
    );
}
