// Call-id names written as an outside API writes them: `toolCallId` (the
// Vercel AI SDK), `ToolUseID`, `REQUEST_ID`. Case and separators do not change
// a name, so each is the call's id, new on every call: keying on one gives
// two identical asks two keys.
use idempotent_tools::{Outcome, Run, idempotent};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<toolCallId>")]
#[allow(non_snake_case)]
async fn refund_order(
    run: Run,
    order_id: String,
    toolCallId: String,
) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

/// Mirrors a provider's JSON.
#[derive(Serialize)]
#[allow(non_snake_case)]
struct ToolResult {
    ToolUseID: String,
    REQUEST_ID: String,
}

#[idempotent(key = "<run>:result:<result.ToolUseID>")]
async fn store_result(run: Run, result: ToolResult) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

#[idempotent(key = "<run>:result:<result.REQUEST_ID>")]
async fn store_other(run: Run, result: ToolResult) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

fn main() {}
