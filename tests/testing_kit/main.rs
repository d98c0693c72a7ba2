//! The test kit itself: the scripted model, the runner and the stand-in
//! provider do what the tests built on them rely on.

use idempotent_tools_testing::ToolCall;
use serde::Deserialize;
use serde_json::json;

mod tools;

mod assertions;
mod concurrency;
mod provider;
mod steps;

/// The refund tool's arguments.
#[derive(Debug, Deserialize)]
struct Args {
    order_id: String,
    usd: u64,
}

/// The model asks for the refund of order 1182 under the call id `id`.
fn ask(id: &str) -> ToolCall {
    ToolCall::new(id, "refund_order", json!({ "order_id": "1182", "usd": 42 }))
}

/// One step of the same ask under each of `ids`.
fn asks(ids: &[&str]) -> Vec<ToolCall> {
    ids.iter().map(|id| ask(id)).collect()
}
