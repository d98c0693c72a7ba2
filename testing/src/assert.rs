//! Assertions that count what reached the provider.

use std::time::Duration;

use super::model::{ScriptedModel, ToolCall};
use super::provider::Provider;
use super::runner::Runner;
use super::tools::Tools;

/// Asserts that exactly one refund reached the provider, however many calls
/// did.
///
/// Count at the provider, not in what the model said at the end: a model can
/// report one refund after two were made.
///
/// # Panics
///
/// If the provider made no refund or more than one. The message lists them
/// and every call that reached the provider.
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools_testing::{Provider, assert_one_action};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools_testing::ProviderError> {
/// let provider = Provider::with_delay(Duration::ZERO);
/// provider.refund("1182", 42, Some("run-1:refund:1182")).await?;
/// provider.refund("1182", 42, Some("run-1:refund:1182")).await?;
/// assert_one_action(&provider);
/// # Ok(()) }
/// ```
#[track_caller]
pub fn assert_one_action(provider: &Provider) {
    let refunds = provider.refunds();
    assert!(
        refunds.len() == 1,
        "expected exactly one refund at the provider, found {}: {refunds:?}\n\
         calls that reached it: {:?}",
        refunds.len(),
        provider.received(),
    );
}

/// Asserts that the same ask, made under two different call ids, reaches the
/// provider under the same idempotency key, and returns that key.
///
/// A tool that keys on the call id fails this: every call gets a new id, so
/// two identical asks would be two refunds at the provider.
///
/// Each call runs alone, as a one-step model, against its own fresh
/// provider and `tools(&provider)`, so a guard never answers the second from
/// the first's record and both reach a provider. Give the tools a fresh
/// store each time `tools` is called. The calls may differ in their
/// free-text arguments: a reworded reason is still the same ask.
///
/// # Panics
///
/// If the ids are equal, if either call does not reach its provider exactly
/// once with a key, or if the keys differ.
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools::{CallId, Run};
/// use idempotent_tools_testing::{Provider, Runner, ToolCall, Tools, assert_same_key_for_same_ask};
/// use serde_json::json;
///
/// #[derive(serde::Deserialize)]
/// struct Args { order_id: String, usd: u64 }
///
/// fn tools(provider: &Provider) -> Tools {
///     let provider = provider.clone();
///     Tools::new().tool("refund_order", move |args: Args, _call: CallId| {
///         let provider = provider.clone();
///         async move {
///             let key = format!("run-1:refund:{}", args.order_id);
///             provider.refund(&args.order_id, args.usd, Some(&key)).await
///         }
///     })
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let ask = ToolCall::new("call_a", "refund_order", json!({ "order_id": "1182", "usd": 42 }));
/// let key = assert_same_key_for_same_ask(&Runner::new(), tools, &ask, &ask.with_id("call_b")).await;
/// assert_eq!(key, "run-1:refund:1182");
/// # }
/// ```
pub async fn assert_same_key_for_same_ask<F>(
    runner: &Runner,
    tools: F,
    first: &ToolCall,
    second: &ToolCall,
) -> String
where
    F: Fn(&Provider) -> Tools,
{
    assert!(
        first.id != second.id,
        "both calls have the id `{}`; the same ask must come under two different call ids",
        first.id,
    );
    let first_key = key_sent(runner, &tools, first).await;
    let second_key = key_sent(runner, &tools, second).await;
    assert!(
        first_key == second_key,
        "the same ask reached the provider under two keys: `{first_key}` (call `{}`) and \
         `{second_key}` (call `{}`), so the provider would refund twice. The key must name the \
         action, such as the run and the order, never the call id or free text",
        first.id,
        second.id,
    );
    first_key
}

/// Runs `call` alone against a fresh provider and returns the key it sent.
async fn key_sent<F>(runner: &Runner, tools: &F, call: &ToolCall) -> String
where
    F: Fn(&Provider) -> Tools,
{
    let provider = Provider::with_delay(Duration::ZERO);
    let transcript = runner
        .run(ScriptedModel::new().step([call.clone()]), &tools(&provider))
        .await;
    let received = provider.received();
    match received.as_slice() {
        [one] => match &one.key {
            Some(key) => key.clone(),
            None => panic!("call `{}` reached the provider without a key", call.id),
        },
        _ => panic!(
            "call `{}` reached the provider {} times, not once, on a fresh provider \
             (give the tools a fresh store each time); the model saw: {:?}",
            call.id,
            received.len(),
            transcript
                .result(call.id.as_str())
                .map(|result| result.seen_by_model()),
        ),
    }
}
