// A tool-call id is new for every call the model makes, so keying on it gives
// two identical asks two keys: the action would run twice.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<tool_call_id>")]
async fn refund_order(
    run: Run,
    order_id: String,
    tool_call_id: String,
) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
