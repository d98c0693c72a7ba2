// Two placeholders with nothing between them are ambiguous: ("1", "23") and
// ("12", "3") would render the same key and share one action.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id><sku>")]
async fn refund_order(run: Run, order_id: String, sku: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
