// A tool that returns no `Result` gives the guard no way to report a store
// failure or to release the claim when the action fails.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn returns_outcome(run: Run, order_id: String) -> Outcome<u64> {
    Outcome::Fresh { value: 0 }
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn returns_nothing(run: Run, order_id: String) {}

fn main() {}
