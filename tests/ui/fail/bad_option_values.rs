// Option values are checked at compile time: durations need a unit, a zero
// retention or lease would defeat the guard, `takeover` has two choices,
// `record_errors` is a flag, and notes must say something.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(
    key = "<run>:refund:<order_id>",
    retention = "7 days",
    lease = "0s",
    wait = 30,
    takeover = "retry",
    record_errors = true,
    note = ""
)]
async fn refund_order(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
