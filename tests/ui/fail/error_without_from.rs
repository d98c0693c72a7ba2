// The tool's error type must carry the guard's errors (a failed store, a
// missing run): it needs `From<idempotent_tools::Error>`. One error, at the return
// type.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[derive(Debug)]
struct DeclinedError;

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(run: Run, order_id: String) -> Result<Outcome<u64>, DeclinedError> {
    Ok(0)
}

fn main() {}
