// `reason` is model-authored free text: the model words it differently on
// each ask, so keying on it would give two identical asks two keys and
// refund twice.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>:<reason>")]
async fn refund_order(
    run: Run,
    order_id: String,
    #[free_text] reason: String,
) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
