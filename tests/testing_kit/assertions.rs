//! The kit's assertions fail, with a message that says why, on the tools
//! they exist to catch.

use std::time::Duration;

use idempotent_tools::CallId;
use idempotent_tools_testing::{
    Provider, Runner, Tools, assert_one_action, assert_same_key_for_same_ask,
};

use crate::{Args, ask};

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
