// An argument outside the key is fingerprinted, so that other arguments
// under the same key are a conflict. One that cannot be serialized must be
// marked as context (or free text) to be left out.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

struct Connection;

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(
    run: Run,
    order_id: String,
    db: Connection,
) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
