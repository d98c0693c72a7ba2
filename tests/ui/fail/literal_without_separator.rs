// A literal after a placeholder needs a separator character, or a value
// could imitate it: order "1x" with sku "2" and order "1" with sku "x2"
// would both render `1xx2`. The runtime's `KeyBuilder` refuses the same
// template.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>x<sku>")]
async fn refund_order(run: Run, order_id: String, sku: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
