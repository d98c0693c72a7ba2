// Keys escape values with `%`, so a literal `%` could imitate an escaped
// value; keys reserve it.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:discount-10%:<order_id>")]
async fn discount(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
