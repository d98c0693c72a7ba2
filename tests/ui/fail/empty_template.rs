// An empty key is a fixed key: every call would be one action.
use idempotent_tools::{Outcome, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "")]
async fn refund_order(order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
