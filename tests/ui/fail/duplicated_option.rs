// An option given twice is refused: with the same value it is noise, with
// different values the two contradict each other.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(
    key = "<run>:refund:<order_id>",
    wait = "5s",
    wait = "30s",
    record_errors,
    record_errors
)]
async fn refund_order(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
