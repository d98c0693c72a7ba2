// A field path into free text: `RefundArgs::wording` is `FreeText<_>`, which
// never implements `KeyPart`, so the key string gets the runtime's
// on_unimplemented message.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

use idempotent_tools::FreeText;
use serde::Serialize;

#[derive(Serialize)]
struct RefundArgs {
    order_id: String,
    wording: FreeText<String>,
}

#[idempotent(key = "<run>:refund:<args.wording>")]
async fn refund_order(run: Run, args: RefundArgs) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
