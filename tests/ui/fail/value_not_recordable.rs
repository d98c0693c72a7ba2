// A replay hands back the first result, so the result is recorded: it must be
// serializable and cloneable.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

struct Receipt;

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(run: Run, order_id: String) -> Result<Outcome<Receipt>, PayError> {
    Ok(Receipt)
}

fn main() {}
