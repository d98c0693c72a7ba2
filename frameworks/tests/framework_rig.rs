//! `#[idempotent]` in rig (rig-core and rig-agent 0.44), driven by rig's own
//! scripted model. Every test counts the refunds that the test kit's
//! stand-in provider made. The tools and the scripts they run under are in
//! `framework_rig_common`.

mod framework_rig_common;
mod frameworks_common;

use framework_rig_common::numbered::{NumberedRefund, RefundNo};
use framework_rig_common::script::{
    assert_one_fresh_then_replays, duplicates, retry_after_failure, run_prompt, shown, status,
    tool_results,
};
use framework_rig_common::tools::{
    PROVIDER, RefundAbove, RefundBelow, RefundOrder, RefundOrderInRun, UnguardedRefund,
};
use idempotent_tools::Run;
use idempotent_tools::rig::{InRun, context};
use idempotent_tools_testing::Provider;
use rig_agent::AgentBuilder;
use rig_agent::test_utils::MockCompletionModel;
use rig_core::message::ToolResult;

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

// A counter from code: a second refund of one order in one run.

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
