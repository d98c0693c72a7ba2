// Placeholders must be closed, non-empty, and name an argument or a field
// path: no expressions, calls or globals, so that the key depends on the
// call's arguments alone. Each mistake is reported.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id")]
async fn unterminated(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

#[idempotent(key = "<run>:<>:<order_id>")]
async fn empty(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

#[idempotent(key = "<run>:<order_id.trim()>:<crate::TENANT>")]
async fn expression(run: Run, order_id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
