// With `record_errors` the first error is recorded and replayed to every
// duplicate, so the error type must be serializable and cloneable too.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>", record_errors)]
async fn refund_order(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
