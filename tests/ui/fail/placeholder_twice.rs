// A placeholder used twice adds nothing to the key; it is a mistake for
// another one.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>:<order_id>")]
async fn refund_order(run: Run, order_id: String, sku: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
