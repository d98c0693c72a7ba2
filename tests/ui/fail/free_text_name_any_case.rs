// Free-text names written as an outside API writes them: `Reason` in a struct
// that mirrors a provider's JSON, `REASON`, `order_Note`, `orderNote`. Case
// and separators do not change a name, so each is the model's wording, worded
// anew on each ask: two asks for one refund would refund twice.
use idempotent_tools::{Outcome, Run, idempotent};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// Mirrors a provider's JSON.
#[derive(Serialize)]
#[allow(non_snake_case)]
struct Ask {
    OrderId: String,
    Reason: String,
    order_Note: String,
    orderNote: String,
}

#[idempotent(key = "<run>:refund:<args.OrderId>:<args.Reason>")]
async fn refund_order(run: Run, args: Ask) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

#[idempotent(key = "<run>:refund:<args.OrderId>:<args.order_Note>")]
async fn refund_noted(run: Run, args: Ask) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

#[idempotent(key = "<run>:refund:<args.OrderId>:<args.orderNote>")]
async fn refund_camel(run: Run, args: Ask) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

#[idempotent(key = "<run>:refund:<order_id>:<REASON>")]
#[allow(non_snake_case)]
async fn refund_shouted(
    run: Run,
    order_id: String,
    REASON: String,
) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

fn main() {}
