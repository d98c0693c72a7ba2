// The template is checked against the arguments while the crate compiles,
// so it must be a string literal.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

const KEY: &str = "<run>:refund:<order_id>";

#[idempotent(key = KEY)]
async fn refund_order(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
