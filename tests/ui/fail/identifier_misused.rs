// `#[identifier]` vouches for a name, never for a type: free text and call
// ids stay out of the key whatever they are marked, and the marker takes no
// arguments.
use idempotent_tools::{CallId, FreeText, Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(
    run: Run,
    order_id: u64,
    #[identifier] note: FreeText<String>,
    #[identifier] call: CallId,
    #[identifier(yes)] text: String,
) -> Result<Outcome<u64>, PayError> {
    let _ = (note, call, text);
    Ok(order_id)
}

fn main() {}
