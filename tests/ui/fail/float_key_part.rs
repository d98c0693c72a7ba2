// Floats may not be key parts: one amount prints several ways, so one ask
// could get several keys. The runtime's `KeyPart` refuses them.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>:<usd>")]
async fn refund_order(run: Run, order_id: String, usd: f64) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
