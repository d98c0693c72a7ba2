//! `#[idempotent]` in rig 0.44: a `#[rig_tool]` refund, driven by rig's own
//! agent loop and scripted model, with two tool calls at a time.
//!
//! The model asks to refund order 1182 four times in three steps: once (the
//! provider makes the refund, but its reply is lost), twice in one step
//! under two call ids, then once more. The stand-in provider counts the
//! refunds it made; the same script runs without the guard for comparison.
//!
//! ```sh
//! cargo run -p idempotent-tools-frameworks --example rig_refund
//! ```

use std::sync::LazyLock;

use idempotent_tools::rig::{InRun, context};
use idempotent_tools::{Outcome, Run, idempotent};
use idempotent_tools_testing::{Provider, ProviderError, Refund};
use rig_agent::test_utils::{MockCompletionModel, MockTurn};
use rig_agent::{Agent, AgentBuilder};
use rig_core::completion::{AssistantContent, Message};
use rig_core::message::{EmptyToolName, ToolName, UserContent};
use rig_core::rig_tool;
use rig_core::tool::{Tool, ToolContext};
use serde::Deserialize;
use serde_json::{Value, json};

/// The payment provider. `#[rig_tool]` functions hold no state, so theirs
/// is a static; a hand-written `impl Tool` would hold it in a field.
static PROVIDER: LazyLock<Provider> = LazyLock::new(Provider::new);

#[derive(Debug, thiserror::Error)]
enum RefundError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// The tool as a rig user writes it, plus one line: `#[idempotent]`.
///
/// `<run>` reads the run scope, which `InRun` enters for each call from the
/// run in rig's `ToolContext`. The reason is the model's own wording, so it
/// stays out of the key and the fingerprint.
#[rig_tool(
    name = "refund_order",
    description = "Refund an order",
    params(
        order_id = "The order to refund",
        usd = "Dollars to refund",
        reason = "Why"
    )
)]
#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, RefundError> {
    let _ = reason;
    // The guard's key, handed on as the provider's idempotency key: a retry
    // after a lost reply gets the refund that was made, not a second one.
    let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
    Ok(PROVIDER.refund(&order_id, usd, key.as_deref()).await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("run-1")?;

    println!("rig: the model asks to refund order 1182 four times in three steps,");
    println!("two tool calls at a time; the provider loses its reply to the first.\n");

    let agent = AgentBuilder::new(script()?)
        .tool(InRun(RefundOrder))
        .build();
    PROVIDER.lose_next_reply();
    let results = prompt(&agent, &run).await?;
    println!("with #[idempotent]:");
    for (call_id, shown) in &results {
        println!("  {call_id}  {shown}");
    }
    println!(
        "  refunds on file: {} (refund calls that reached the provider: {})\n",
        PROVIDER.refunds_on_file(),
        PROVIDER.calls_received()
    );

    let plain = Provider::new();
    plain.lose_next_reply();
    let agent = AgentBuilder::new(script()?)
        .tool(Unguarded(plain.clone()))
        .build();
    prompt(&agent, &run).await?;
    println!("without it:");
    println!("  refunds on file: {}", plain.refunds_on_file());
    Ok(())
}

/// Step 1: one refund. Step 2: the same refund twice, under two call ids
/// and worded differently. Step 3: the same refund again. Then an answer.
fn script() -> Result<MockCompletionModel, EmptyToolName> {
    let call = |id: &str, reason: &str| -> Result<AssistantContent, EmptyToolName> {
        let args = json!({ "order_id": "1182", "usd": 42, "reason": reason });
        Ok(AssistantContent::tool_call(
            id,
            ToolName::new("refund_order")?,
            args,
        ))
    };
    Ok(MockCompletionModel::from_turns([
        MockTurn::from_contents([call("call_1", "customer asked")?]),
        MockTurn::from_contents([
            call("call_2", "retrying the refund")?,
            call("call_3", "the customer wants their money back")?,
        ]),
        MockTurn::from_contents([call("call_4", "making sure")?]),
        MockTurn::text("Order 1182 is refunded."),
    ]))
}

/// Runs the prompt with the run in the tool context, two tools at a time,
/// and returns what each tool call showed the model.
async fn prompt(
    agent: &Agent,
    run: &Run,
) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let response = agent
        .prompt("Refund order 1182, $42.")
        .tool_context(context(run))
        .tool_concurrency(2)
        .max_turns(6)
        .await?;
    let mut shown = Vec::new();
    for message in &response.messages {
        let Message::User { content } = message else {
            continue;
        };
        for item in content.iter() {
            let UserContent::ToolResult(result) = item else {
                continue;
            };
            let call_id = result
                .call
                .provider()
                .map(|id| id.as_str().to_owned())
                .unwrap_or_default();
            let value = serde_json::to_value(&result.content)?;
            shown.push((call_id, describe(&value[0], result.is_error)));
        }
    }
    Ok(shown)
}

fn describe(block: &Value, is_error: bool) -> String {
    if is_error {
        let text = block["text"].as_str().unwrap_or_default();
        return format!("error   {text}");
    }
    let outcome = &block["value"];
    let status = outcome["status"].as_str().unwrap_or_default();
    let id = outcome["value"]["id"].as_str().unwrap_or_default();
    match outcome["note"].as_str() {
        Some(note) => format!("{status:<7} {id}  \"{note}\""),
        None => format!("{status:<7} {id}"),
    }
}

/// The same tool with no guard, written by hand.
struct Unguarded(Provider);

#[derive(Deserialize)]
struct RefundArgs {
    order_id: String,
    usd: u64,
}

impl Tool for Unguarded {
    const NAME: &'static str = "refund_order";
    type Args = RefundArgs;
    type Output = Refund;
    type Error = RefundError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        RefundOrder.parameters()
    }

    async fn call(&self, _: &mut ToolContext, args: RefundArgs) -> Result<Refund, RefundError> {
        Ok(self.0.refund(&args.order_id, args.usd, None).await?)
    }
}
