//! `#[idempotent]` in rig (rig-core and rig-agent 0.44), driven by rig's own
//! scripted model. Every test counts the refunds that the test kit's
//! stand-in provider made.

mod frameworks_common;

use std::sync::LazyLock;

use frameworks_common::{ShopError, provider_key};
use idempotent_tools::rig::{InRun, context, run_of};
use idempotent_tools::testing::{Provider, Refund};
use idempotent_tools::{Outcome, Run, idempotent};
use rig_agent::test_utils::{MockCompletionModel, MockTurn};
use rig_agent::{Agent, AgentBuilder};
use rig_core::completion::{AssistantContent, Message};
use rig_core::message::{ToolName, ToolResult, UserContent};
use rig_core::rig_tool;
use rig_core::tool::{ContextValue, Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// The tools, in every way rig makes one.

/// Shared by the two `#[rig_tool]` functions, which have no state of their
/// own. Each test refunds its own order, so they never count each other's.
static PROVIDER: LazyLock<Provider> = LazyLock::new(Provider::default);

// `#[rig_tool]` above `#[idempotent]`: rig reads the function first, then
// the guard rewrites its body.
#[rig_tool(
    name = "refund",
    description = "Refund an order",
    params(
        order_id = "The order to refund",
        usd = "Dollars to refund",
        reason = "Why"
    )
)]
#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_below(
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = reason;
    Ok(PROVIDER
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

// `#[idempotent]` above `#[rig_tool]`: the guard rewrites the body and keeps
// the signature, which rig then reads.
#[idempotent(key = "<run>:refund:<order_id>")]
#[rig_tool(
    name = "refund",
    description = "Refund an order",
    params(
        order_id = "The order to refund",
        usd = "Dollars to refund",
        reason = "Why"
    )
)]
async fn refund_above(
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = reason;
    Ok(PROVIDER
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

/// A hand-written rig tool, delegating to an annotated function that takes
/// the run as an argument.
struct RefundOrder {
    provider: Provider,
}

#[derive(Deserialize)]
struct RefundArgs {
    order_id: String,
    usd: u64,
    reason: String,
}

/// The JSON schema of [`RefundArgs`], shared by the hand-written tools.
fn refund_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order_id": { "type": "string" },
            "usd": { "type": "integer" },
            "reason": { "type": "string" }
        },
        "required": ["order_id", "usd", "reason"]
    })
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, reason);
    Ok(provider
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

impl Tool for RefundOrder {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Outcome<Refund>;
    type Error = ShopError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Outcome<Refund>, ShopError> {
        let run = run_of(context)?;
        refund_order(&self.provider, &run, args.order_id, args.usd, args.reason).await
    }
}

/// The same hand-written tool with no guard: what most tools look like.
struct UnguardedRefund {
    provider: Provider,
}

impl Tool for UnguardedRefund {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Refund;
    type Error = ShopError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(&self, _: &mut ToolContext, args: RefundArgs) -> Result<Refund, ShopError> {
        Ok(self.provider.refund(&args.order_id, args.usd, None).await?)
    }
}

// ---------------------------------------------------------------------------
// Scripts and a driver.

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
fn duplicates(order_id: &str) -> MockCompletionModel {
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
fn retry_after_failure(order_id: &str) -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::from_contents([refund_call("call_1", order_id, "customer asked")]),
        MockTurn::from_contents([refund_call("call_2", order_id, "retrying")]),
        MockTurn::text("Refunded."),
    ])
}

/// Runs one prompt with the run in its tool context, two tools at a time,
/// and returns every tool result in call order.
async fn run_prompt(agent: &Agent, run: &str) -> Vec<ToolResult> {
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

fn tool_results(messages: &[Message]) -> Vec<ToolResult> {
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
fn shown(result: &ToolResult) -> Value {
    serde_json::to_value(&result.content).unwrap_or_else(|e| panic!("tool result: {e}"))
}

fn status(result: &ToolResult) -> Option<String> {
    shown(result)[0]["value"]["status"]
        .as_str()
        .map(str::to_owned)
}

/// Asserts the duplicates script's results: one fresh, then replays that
/// carry the first refund and a note, none of them an error.
fn assert_one_fresh_then_replays(results: &[ToolResult]) {
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
    assert_eq!(note, Some(json!(idempotent_tools::DEFAULT_REPLAY_NOTE)));
}

// ---------------------------------------------------------------------------
// The tests.

#[tokio::test(flavor = "multi_thread")]
async fn without_the_guard_two_calls_in_one_step_and_a_repeat_refund_three_times() {
    // The control: this harness does make duplicates reach the provider.
    let provider = Provider::default();
    let agent = AgentBuilder::new(duplicates("1180"))
        .tool(UnguardedRefund {
            provider: provider.clone(),
        })
        .build();
    run_prompt(&agent, "rig-control").await;
    assert_eq!(provider.refunds_of("1180"), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn rig_tool_above_idempotent_refunds_once_for_duplicates_in_one_step_and_the_next() {
    let agent = AgentBuilder::new(duplicates("1181"))
        .tool(InRun(RefundBelow))
        .build();
    let results = run_prompt(&agent, "rig-below").await;
    assert_eq!(PROVIDER.refunds_of("1181"), 1);
    assert_one_fresh_then_replays(&results);
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_above_rig_tool_refunds_once_for_duplicates_in_one_step_and_the_next() {
    let agent = AgentBuilder::new(duplicates("1182"))
        .tool(InRun(RefundAbove))
        .build();
    let results = run_prompt(&agent, "rig-above").await;
    assert_eq!(PROVIDER.refunds_of("1182"), 1);
    assert_one_fresh_then_replays(&results);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_written_tool_delegating_to_an_annotated_fn_refunds_once() {
    let provider = Provider::default();
    let agent = AgentBuilder::new(duplicates("1183"))
        .tool(RefundOrder {
            provider: provider.clone(),
        })
        .build();
    let results = run_prompt(&agent, "rig-hand").await;
    assert_eq!(provider.refunds_of("1183"), 1);
    assert_one_fresh_then_replays(&results);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_a_lost_reply_refunds_once_and_returns_the_first_refund() {
    let provider = Provider::default();
    provider.lose_next_reply();
    let agent = AgentBuilder::new(retry_after_failure("1184"))
        .tool(RefundOrder {
            provider: provider.clone(),
        })
        .build();
    let results = run_prompt(&agent, "rig-retry").await;

    assert_eq!(provider.refunds_of("1184"), 1);
    assert_eq!(results.len(), 2);
    // The failure reached the model as an error, so it retried...
    assert!(results[0].is_error);
    // ...and the guard let the retry run: the provider knew the key and
    // answered with the refund it had made.
    assert!(!results[1].is_error);
    assert_eq!(status(&results[1]).as_deref(), Some("fresh"));
    assert_eq!(shown(&results[1])[0]["value"]["value"]["id"], "re_1");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_refund_in_two_runs_is_two_refunds_even_on_one_agent() {
    // Two prompts on one agent share its bus: either may poll the other's
    // tools. The run comes from each dispatch's context, so each run keeps
    // its own key.
    let provider = Provider::default();
    let agent = AgentBuilder::new(MockCompletionModel::text("unused"))
        .tool(InRun(RefundOrderInRun {
            provider: provider.clone(),
        }))
        .build();
    let prompt = |run: &str| {
        let run = Run::new(run).unwrap_or_else(|e| panic!("run: {e}"));
        agent
            .prompt("Refund the order.")
            .using_model_value(duplicates("1185"))
            .tool_context(context(&run))
            .tool_concurrency(2)
            .max_turns(6)
    };
    let (first, second) = tokio::join!(prompt("rig-shared-a"), prompt("rig-shared-b"));
    let first = tool_results(&first.unwrap_or_else(|e| panic!("run a: {e}")).messages);
    let second = tool_results(&second.unwrap_or_else(|e| panic!("run b: {e}")).messages);

    assert_eq!(provider.refunds_of("1185"), 2, "one refund per run");
    for results in [&first, &second] {
        let fresh = results
            .iter()
            .filter(|r| status(r).as_deref() == Some("fresh"))
            .count();
        assert_eq!(fresh, 1, "each run acted once");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_without_a_run_in_its_context_refunds_nothing() {
    let provider = Provider::default();
    let agent = AgentBuilder::new(retry_after_failure("1186"))
        .tool(InRun(RefundOrderInRun {
            provider: provider.clone(),
        }))
        .build();
    let response = agent
        .prompt("Refund the order.")
        .max_turns(6)
        .await
        .unwrap_or_else(|e| panic!("the run failed: {e}"));
    let results = tool_results(&response.messages);

    assert_eq!(provider.refunds_of("1186"), 0);
    assert!(results.iter().all(|r| r.is_error));
}

/// A hand-written tool whose annotated function reads `<run>` from the run
/// scope, which `InRun` enters from the tool context.
struct RefundOrderInRun {
    provider: Provider,
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_in_scope(
    #[context] provider: &Provider,
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = reason;
    Ok(provider
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

impl Tool for RefundOrderInRun {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Outcome<Refund>;
    type Error = ShopError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Outcome<Refund>, ShopError> {
        refund_in_scope(&self.provider, args.order_id, args.usd, args.reason).await
    }
}

// ---------------------------------------------------------------------------
// A counter from code: a second refund of one order in one run.

/// Which refund of an order a prompt may make: 1, or 2 once the application
/// has approved a second one. It travels in the tool context, which the
/// application fills in and the model never sees, so no wording of the
/// model's can move it.
#[derive(Clone, Copy, Serialize, Deserialize)]
struct RefundNo(u32);

impl ContextValue for RefundNo {
    const KEY: &'static str = "shop.refund_no";
}

#[idempotent(key = "<run>:refund:<order_id>:<refund_no>")]
async fn refund_numbered(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    refund_no: u32,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, reason);
    Ok(provider
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

/// Every argument of a rig tool is the model's; the counter comes from the
/// context.
struct NumberedRefund {
    provider: Provider,
}

impl Tool for NumberedRefund {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Outcome<Refund>;
    type Error = ShopError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Outcome<Refund>, ShopError> {
        let run = run_of(context)?;
        let refund_no = context.get::<RefundNo>().ok().flatten().map_or(1, |n| n.0);
        let provider = &self.provider;
        refund_numbered(
            provider,
            &run,
            args.order_id,
            refund_no,
            args.usd,
            args.reason,
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_refund_approved_through_the_context_acts_once_and_repeats_replay() {
    let provider = Provider::default();
    let agent = AgentBuilder::new(MockCompletionModel::text("unused"))
        .tool(NumberedRefund {
            provider: provider.clone(),
        })
        .build();
    let run = Run::new("rig-counter").unwrap_or_else(|e| panic!("run: {e}"));
    let prompt = |refund_no: Option<u32>| {
        let mut tool_context = context(&run);
        if let Some(n) = refund_no {
            let inserted = tool_context.insert(RefundNo(n));
            inserted.unwrap_or_else(|e| panic!("context: {e}"));
        }
        agent
            .prompt("Refund the order.")
            .using_model_value(duplicates("1187"))
            .tool_context(tool_context)
            .tool_concurrency(2)
            .max_turns(6)
    };
    let fresh = |results: &[ToolResult]| {
        results
            .iter()
            .filter(|r| status(r).as_deref() == Some("fresh"))
            .count()
    };

    let first = prompt(None).await.unwrap_or_else(|e| panic!("run: {e}"));
    assert_eq!(fresh(&tool_results(&first.messages)), 1);
    assert_eq!(provider.refunds_of("1187"), 1);

    // The application approves a second refund of the order in this run.
    let second = prompt(Some(2)).await.unwrap_or_else(|e| panic!("run: {e}"));
    assert_eq!(fresh(&tool_results(&second.messages)), 1);
    assert_eq!(provider.refunds_of("1187"), 2);

    // Asked again under the same approval: nothing new.
    let third = prompt(Some(2)).await.unwrap_or_else(|e| panic!("run: {e}"));
    assert_eq!(fresh(&tool_results(&third.messages)), 0);
    assert_eq!(provider.refunds_of("1187"), 2);
}
