// A placeholder must name an argument. `<ordr_id>` names none, so the key
// could not be rendered; the message lists the arguments and suggests
// `<order_id>`.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<ordr_id>")]
async fn refund_order(run: Run, order_id: String, usd: u64) -> Result<Outcome<u64>, PayError> {
    Ok(usd)
}

fn main() {}
