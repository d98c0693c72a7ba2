// The success type must be a `ToolOutput` such as `Outcome<T>`: a bare value
// could not tell the caller a replay from a fresh result.
use idempotent_tools::{Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(run: Run, order_id: String) -> Result<u64, PayError> {
    Ok(0)
}

fn main() {}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Refund;

// A type of the tool's own is caught by the `ToolOutput` bound.
#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_struct(run: Run, order_id: String) -> Result<Refund, PayError> {
    Ok(Refund)
}
