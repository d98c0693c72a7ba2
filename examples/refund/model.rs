//! The model: the asks it makes, in the orders each row plays them.

use idempotent_tools_testing::{ScriptedModel, ToolCall};
use serde_json::json;

pub fn ask(id: &str, usd: u64, reason: &str) -> ToolCall {
    ToolCall::new(
        id,
        "refund_order",
        json!({ "order_id": "1182", "usd": usd, "reason": reason }),
    )
}

/// The same refund twice in one step, under two call ids, then an answer.
pub fn twice_in_one_step() -> ScriptedModel {
    ScriptedModel::new()
        .step([
            ask("call_a", 42, "damaged in transit"),
            ask("call_b", 42, "arrived broken"),
        ])
        .answer("Refunded order 1182.")
}

/// The same refund in one step, and again in the next.
pub fn once_in_each_of_two_steps() -> ScriptedModel {
    ScriptedModel::new()
        .step([ask("call_a", 42, "damaged in transit")])
        .step([ask("call_b", 42, "arrived broken")])
        .answer("Refunded order 1182.")
}

/// The refund once; if it comes back as an error, once more.
pub fn once_then_again_if_it_failed() -> ScriptedModel {
    ScriptedModel::new()
        .step([ask("call_a", 42, "damaged in transit")])
        .retry_failed()
        .answer("Refunded order 1182.")
}

/// $42 on the order, then $41 on the same order.
pub fn forty_two_then_forty_one() -> ScriptedModel {
    ScriptedModel::new()
        .step([ask("call_a", 42, "damaged in transit")])
        .step([ask("call_b", 41, "damaged, minus shipping")])
        .answer("Refunded order 1182.")
}
