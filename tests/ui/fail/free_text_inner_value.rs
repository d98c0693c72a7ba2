// A path through `FreeText` to the text inside it: `.0` is private, so the
// wording can never reach a key by a detour. Two asks worded differently
// would otherwise get two keys, and the refund would run twice.
use idempotent_tools::{FreeText, Outcome, Run, idempotent};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[derive(Serialize)]
struct RefundArgs {
    order_id: String,
    wording: FreeText<String>,
}

#[idempotent(key = "<run>:refund:<args.wording.0>")]
async fn refund_order(run: Run, args: RefundArgs) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
