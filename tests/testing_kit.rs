//! The test kit itself: the scripted model, the runner and the stand-in
//! provider do what the tests built on them rely on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotent_tools::testing::{
    Concurrency, Provider, ProviderError, Runner, ScriptedModel, ToolCall, Tools,
    assert_one_action, assert_same_key_for_same_ask,
};
use idempotent_tools::{CallId, Run};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Barrier, Notify};

/// A safety net so that a broken runner fails the test instead of hanging it.
/// It never orders events: barriers and notifications do that.
const HANG: Duration = Duration::from_secs(10);

#[derive(Debug, Deserialize)]
struct Args {
    order_id: String,
    usd: u64,
}

fn ask(id: &str) -> ToolCall {
    ToolCall::new(id, "refund_order", json!({ "order_id": "1182", "usd": 42 }))
}

fn asks(ids: &[&str]) -> Vec<ToolCall> {
    ids.iter().map(|id| ask(id)).collect()
}

/// Counts the calls in flight and remembers the most at once.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl InFlight {
    async fn during<T>(&self, work: impl Future<Output = T>) -> T {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let out = work.await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        out
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// A tool that refunds without a key, counting how many calls overlap.
fn counted_refunds(provider: &Provider, in_flight: &Arc<InFlight>) -> Tools {
    let (provider, in_flight) = (provider.clone(), Arc::clone(in_flight));
    Tools::new().tool("refund_order", move |args: Args, _call: CallId| {
        let (provider, in_flight) = (provider.clone(), Arc::clone(&in_flight));
        async move {
            let refund = provider.refund(&args.order_id, args.usd, None);
            in_flight.during(refund).await
        }
    })
}

/// A tool that returns only once every call of the step has reached it.
fn meet(barrier: &Arc<Barrier>) -> Tools {
    let barrier = Arc::clone(barrier);
    Tools::new().tool("refund_order", move |_: Args, call: CallId| {
        let barrier = Arc::clone(&barrier);
        async move {
            barrier.wait().await;
            Ok::<_, ProviderError>(call.as_str().to_owned())
        }
    })
}

// ---------------------------------------------------------------------------
// The runner.

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

// ---------------------------------------------------------------------------
// The provider.

#[tokio::test]
async fn the_provider_keeps_the_first_refund_under_a_key() {
    let provider = Provider::with_delay(Duration::ZERO);
    let first = provider.refund("1182", 42, Some("k")).await;
    let again = provider.refund("1182", 42, Some("k")).await;
    let other = provider.refund("1183", 42, Some("k2")).await;
    assert_eq!(first, again);
    assert_ne!(first, other);
    assert_eq!(provider.refunds_on_file(), 2);
    assert_eq!(provider.calls_received(), 3);
    let keys: Vec<_> = provider.received().into_iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        [Some("k".into()), Some("k".into()), Some("k2".into())]
    );
}

#[tokio::test]
async fn the_provider_counts_the_refunds_of_each_order_apart() {
    let provider = Provider::with_delay(Duration::ZERO);
    provider.refund("1182", 42, Some("k")).await.ok();
    provider.refund("1182", 42, Some("k")).await.ok();
    provider.refund("1182", 42, None).await.ok();
    provider.refund("1183", 42, None).await.ok();
    assert_eq!(
        provider.refunds_of("1182"),
        2,
        "a repeat under a key is no refund"
    );
    assert_eq!(provider.refunds_of("1183"), 1);
    assert_eq!(provider.refunds_of("1184"), 0);
    assert_eq!(provider.refunds_on_file(), 3);
}

#[tokio::test]
async fn the_provider_refunds_every_call_without_a_key() {
    let provider = Provider::with_delay(Duration::ZERO);
    for _ in 0..3 {
        provider.refund("1182", 42, None).await.ok();
    }
    let ids: Vec<_> = provider.refunds().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["re_1", "re_2", "re_3"]);
}

#[tokio::test]
async fn a_lost_reply_still_made_the_refund_and_a_retry_under_the_key_gets_it() {
    let provider = Provider::with_delay(Duration::ZERO);
    provider.lose_next_reply();
    assert_eq!(
        provider.refund("1182", 42, Some("k")).await,
        Err(ProviderError::ReplyLost)
    );
    assert_eq!(provider.refunds_on_file(), 1);
    let retried = provider.refund("1182", 42, Some("k")).await;
    assert_eq!(retried.map(|r| r.id), Ok("re_1".to_owned()));
    assert_eq!(provider.refunds_on_file(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn the_providers_network_yields_even_with_no_delay() {
    let provider = Provider::with_delay(Duration::ZERO);
    let other_ran = Arc::new(AtomicUsize::new(0));
    let other = {
        let other_ran = Arc::clone(&other_ran);
        async move {
            other_ran.fetch_add(1, Ordering::SeqCst);
        }
    };
    let refund = async {
        provider.refund("1182", 42, None).await.ok();
        // Joined below after `refund`: it ran only if the provider yielded.
        other_ran.load(Ordering::SeqCst)
    };
    let (seen, ()) = tokio::join!(refund, other);
    assert_eq!(seen, 1);
}

// ---------------------------------------------------------------------------
// The assertions.

#[tokio::test]
#[should_panic(expected = "expected exactly one refund at the provider, found 2")]
async fn assert_one_action_fails_on_two_refunds() {
    let provider = Provider::with_delay(Duration::ZERO);
    provider.refund("1182", 42, None).await.ok();
    provider.refund("1182", 42, None).await.ok();
    assert_one_action(&provider);
}

#[tokio::test]
#[should_panic(expected = "expected exactly one refund at the provider, found 0")]
async fn assert_one_action_fails_when_nothing_reached_the_provider() {
    assert_one_action(&Provider::with_delay(Duration::ZERO));
}

/// A tool that keys its refund with the call id.
fn keyed_by_call_id(provider: &Provider) -> Tools {
    let provider = provider.clone();
    Tools::new().tool("refund_order", move |args: Args, call: CallId| {
        let provider = provider.clone();
        async move {
            provider
                .refund(&args.order_id, args.usd, Some(call.as_str()))
                .await
        }
    })
}

#[tokio::test]
#[should_panic(expected = "the same ask reached the provider under two keys")]
async fn the_same_key_assertion_catches_a_tool_keyed_by_call_id() {
    let a = ask("call_a");
    assert_same_key_for_same_ask(&Runner::new(), keyed_by_call_id, &a, &a.with_id("call_b")).await;
}

#[tokio::test]
#[should_panic(expected = "must come under two different call ids")]
async fn the_same_key_assertion_needs_two_call_ids() {
    let a = ask("call_a");
    assert_same_key_for_same_ask(&Runner::new(), keyed_by_call_id, &a, &a).await;
}
