// A path through `CallId` to the id's text: `.0` is private, so a call id can
// never reach a key by a detour. The framework makes a new id for every call,
// so two identical asks would otherwise get two keys and act twice.
use idempotent_tools::{CallId, Outcome, Run, idempotent};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[derive(Serialize)]
struct RefundArgs {
    order_id: String,
    call: CallId,
}

#[idempotent(key = "<run>:refund:<args.call.0>")]
async fn refund_order(run: Run, args: RefundArgs) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
