// Unknown options are refused, with the name that was probably meant.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(
    key = "<run>:refund:<order_id>",
    retension = "7d",
    ttl = "1d",
    colour = "red"
)]
async fn refund_order(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
