//! The runner runs the calls of a step together (joined in one task, or
//! spawned), up to its concurrency, and returns the results in call order.

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::CallId;
use idempotent_tools_testing::{
    Concurrency, Provider, ProviderError, Runner, ScriptedModel, Tools,
};
use serde_json::json;
use tokio::sync::{Barrier, Notify};

use crate::tools::{InFlight, counted_refunds, meet};
use crate::{Args, asks};

/// A safety net so that a broken runner fails the test instead of hanging it.
/// It never orders events: barriers and notifications do that.
const HANG: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "current_thread")]
async fn joined_calls_of_one_step_run_at_the_same_time_in_one_task() {
    let barrier = Arc::new(Barrier::new(2));
    let model = ScriptedModel::new().step(asks(&["call_a", "call_b"]));
    // One thread, no spawn: the barrier opens only if both calls are polled together.
    let (runner, tools) = (Runner::new(), meet(&barrier));
    let transcript = tokio::time::timeout(HANG, runner.run(model, &tools))
        .await
        .expect("the joined calls never met");
    assert_eq!(transcript.steps().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_calls_of_one_step_run_at_the_same_time() {
    let barrier = Arc::new(Barrier::new(3));
    let model = ScriptedModel::new().step(asks(&["call_a", "call_b", "call_c"]));
    let (runner, tools) = (Runner::spawned(), meet(&barrier));
    let transcript = tokio::time::timeout(HANG, runner.run(model, &tools))
        .await
        .expect("the spawned calls never met");
    let got: Vec<_> = transcript.results().map(|r| r.output.clone()).collect();
    assert_eq!(
        got,
        [
            Ok(json!("call_a")),
            Ok(json!("call_b")),
            Ok(json!("call_c"))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_concurrency_of_one_runs_calls_one_at_a_time() {
    for concurrency in [Concurrency::Joined, Concurrency::Spawned] {
        let provider = Provider::with_delay(Duration::ZERO);
        let in_flight = Arc::new(InFlight::default());
        let model = ScriptedModel::new().step(asks(&["call_a", "call_b", "call_c"]));
        let runner = Runner::new()
            .concurrency(concurrency)
            .tool_call_concurrency(1);
        runner
            .run(model, &counted_refunds(&provider, &in_flight))
            .await;
        assert_eq!(in_flight.most(), 1, "{concurrency:?}");
        assert_eq!(provider.calls_received(), 3, "{concurrency:?}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_tool_call_concurrency_of_two_runs_two_of_three_calls_at_once() {
    let provider = Provider::with_delay(Duration::ZERO);
    let in_flight = Arc::new(InFlight::default());
    let model = ScriptedModel::new().step(asks(&["call_a", "call_b", "call_c"]));
    let runner = Runner::new().tool_call_concurrency(2);
    runner
        .run(model, &counted_refunds(&provider, &in_flight))
        .await;
    assert_eq!(in_flight.most(), 2);
    assert_eq!(provider.calls_received(), 3);
}

#[tokio::test(flavor = "current_thread")]
async fn a_concurrency_of_zero_is_taken_as_one() {
    let provider = Provider::with_delay(Duration::ZERO);
    let in_flight = Arc::new(InFlight::default());
    let model = ScriptedModel::new().step(asks(&["call_a", "call_b"]));
    let runner = Runner::new().tool_call_concurrency(0);
    runner
        .run(model, &counted_refunds(&provider, &in_flight))
        .await;
    assert_eq!(in_flight.most(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_come_back_in_the_order_of_the_calls_not_of_finishing() {
    for concurrency in [Concurrency::Joined, Concurrency::Spawned] {
        let b_done = Arc::new(Notify::new());
        let tools = Tools::new().tool("refund_order", {
            let b_done = Arc::clone(&b_done);
            move |_: Args, call: CallId| {
                let b_done = Arc::clone(&b_done);
                async move {
                    if call.as_str() == "call_a" {
                        // `notify_one` stores a permit, so the order of arrival does not matter.
                        b_done.notified().await;
                    } else {
                        b_done.notify_one();
                    }
                    Ok::<_, ProviderError>(call.as_str().to_owned())
                }
            }
        });
        let model = ScriptedModel::new().step(asks(&["call_a", "call_b"]));
        let runner = Runner::new().concurrency(concurrency);
        let transcript = tokio::time::timeout(HANG, runner.run(model, &tools))
            .await
            .expect("call_a never finished");
        let ids: Vec<_> = transcript.results().map(|r| r.call.id.as_str()).collect();
        assert_eq!(ids, ["call_a", "call_b"], "{concurrency:?}");
        let got: Vec<_> = transcript.results().map(|r| r.output.clone()).collect();
        assert_eq!(
            got,
            [Ok(json!("call_a")), Ok(json!("call_b"))],
            "{concurrency:?}"
        );
    }
}
