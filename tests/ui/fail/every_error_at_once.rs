// All of an item's errors are reported in one build, and the function is
// still emitted, so the call in `main` resolves and adds no error of its own.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(
    key = "<run>:refund:<ordr_id>:<reason>",
    wait = "soon",
    retension = "7d"
)]
async fn refund_order(
    run: Run,
    order_id: String,
    #[free_text] reason: String,
) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {
    let _future = refund_order(Run::new("run-1").unwrap(), "1182".into(), "damaged".into());
}
