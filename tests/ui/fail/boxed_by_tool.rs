// This is what a function looks like after rmcp's `#[tool]` has boxed it:
// `#[idempotent]` was placed below `#[tool]`, and must go above it.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

use std::future::Future;
use std::pin::Pin;

#[idempotent(key = "<run>:refund:<order_id>")]
fn refund_order(
    run: Run,
    order_id: String,
) -> Pin<Box<dyn Future<Output = Result<Outcome<u64>, PayError>> + Send>> {
    Box::pin(async move { Ok(Outcome::Fresh { value: 0 }) })
}

fn main() {}
