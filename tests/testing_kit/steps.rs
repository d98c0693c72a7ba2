//! The runner's steps: one after another, the model's retry of a failed
//! call, errors shown to the model, the run in scope, and a tool's panic.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotent_tools::{CallId, Run};
use idempotent_tools_testing::{Provider, ProviderError, Runner, ScriptedModel, ToolCall, Tools};
use serde_json::json;

use crate::tools::{InFlight, counted_refunds};
use crate::{Args, ask, asks};

#[tokio::test]
async fn each_step_runs_after_the_last_and_the_model_ends_with_its_answer() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let tools = Tools::new().tool("refund_order", {
        let order = Arc::clone(&order);
        move |_: Args, call: CallId| {
            let order = Arc::clone(&order);
            async move {
                tokio::task::yield_now().await;
                order.lock().expect("not poisoned").push(call.into_string());
                Ok::<_, ProviderError>(())
            }
        }
    });
    let model = ScriptedModel::new()
        .step(asks(&["call_a", "call_b"]))
        .step(asks(&["call_c"]))
        .answer("Refunded order 1182.");
    let transcript = Runner::new().run(model, &tools).await;
    assert_eq!(transcript.steps().len(), 2);
    assert_eq!(transcript.answer(), "Refunded order 1182.");
    let order = order.lock().expect("not poisoned").clone();
    assert_eq!(order.last().map(String::as_str), Some("call_c"));
}

#[tokio::test]
async fn a_model_that_reads_an_error_retries_that_call_under_a_new_id() {
    let provider = Provider::with_delay(Duration::ZERO);
    provider.lose_next_reply();
    let in_flight = Arc::new(InFlight::default());
    let model = ScriptedModel::new()
        .step(asks(&["call_a"]))
        .retry_failed()
        .answer("Refunded order 1182.");
    let transcript = Runner::new()
        .run(model, &counted_refunds(&provider, &in_flight))
        .await;

    let steps = transcript.steps();
    assert_eq!(steps.len(), 2);
    assert!(
        steps[0][0].output.is_err(),
        "the model saw: {:?}",
        steps[0][0]
    );
    assert_eq!(steps[1][0].call.id.as_str(), "call_a_retry");
    assert_eq!(steps[1][0].call.args, ask("call_a").args);
    assert!(steps[1][0].output.is_ok());
    // No key: the lost reply and the retry are two refunds.
    assert_eq!(provider.refunds_on_file(), 2);
}

#[tokio::test]
async fn a_retry_step_after_a_step_with_no_errors_is_skipped() {
    let provider = Provider::with_delay(Duration::ZERO);
    let in_flight = Arc::new(InFlight::default());
    let model = ScriptedModel::new()
        .step(asks(&["call_a"]))
        .retry_failed()
        .answer("Done.");
    let transcript = Runner::new()
        .run(model, &counted_refunds(&provider, &in_flight))
        .await;
    assert_eq!(transcript.steps().len(), 1);
    assert_eq!(transcript.answer(), "Done.");
    assert_eq!(provider.calls_received(), 1);
}

#[tokio::test]
async fn an_unknown_tool_or_bad_arguments_come_back_to_the_model_as_errors() {
    let provider = Provider::with_delay(Duration::ZERO);
    let in_flight = Arc::new(InFlight::default());
    let model = ScriptedModel::new().step([
        ToolCall::new("call_a", "send_email", json!({})),
        ToolCall::new("call_b", "refund_order", json!({ "order_id": 1182 })),
    ]);
    let transcript = Runner::new()
        .run(model, &counted_refunds(&provider, &in_flight))
        .await;
    let a = transcript.result("call_a").map(|r| r.seen_by_model());
    let b = transcript.result("call_b").map(|r| r.seen_by_model());
    assert!(a.is_some_and(|a| {
        a["error"]
            .as_str()
            .is_some_and(|e| e.contains("send_email"))
    }));
    assert!(b.is_some_and(|b| {
        b["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid arguments"))
    }));
    assert_eq!(provider.calls_received(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_runs_in_the_run_even_in_a_spawned_task() {
    let tools = Tools::new().tool("refund_order", |_: Args, _call: CallId| async {
        Ok::<_, ProviderError>(Run::current().map(|run| run.to_string()))
    });
    let model = || ScriptedModel::new().step(asks(&["call_a", "call_b"]));
    let run = Run::new("run-7").expect("a run id");

    // Set on the runner.
    let transcript = Runner::spawned()
        .in_run(run.clone())
        .run(model(), &tools)
        .await;
    assert!(transcript.results().all(|r| r.output == Ok(json!("run-7"))));

    // Or in scope where the runner is awaited: carried into the spawned tasks.
    let transcript = run.scope(Runner::spawned().run(model(), &tools)).await;
    assert!(transcript.results().all(|r| r.output == Ok(json!("run-7"))));

    // Neither: no run.
    let transcript = Runner::spawned().run(model(), &tools).await;
    assert!(transcript.results().all(|r| r.output == Ok(json!(null))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "the tool broke")]
async fn a_tools_panic_reaches_the_test_from_a_spawned_task() {
    let tools = Tools::new().tool("refund_order", |_: Args, _call: CallId| async {
        if true {
            panic!("the tool broke");
        }
        Ok::<_, ProviderError>(())
    });
    Runner::spawned()
        .run(ScriptedModel::new().step(asks(&["call_a"])), &tools)
        .await;
}
