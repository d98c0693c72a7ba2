// A key of fixed text makes every call one action: the second refund of any
// order would replay the first.
use idempotent_tools::{Outcome, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "refund")]
async fn refund_order(order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
