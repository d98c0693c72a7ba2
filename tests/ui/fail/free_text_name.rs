// Names that almost always carry the model's own wording, unmarked: an
// argument (`description`) and a field (`args.reason`). The model words them
// anew on each ask, so two asks for one ticket would open two tickets.
use idempotent_tools::{Outcome, Run, idempotent};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
enum TicketError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[derive(Serialize)]
struct RefundArgs {
    order_id: String,
    reason: String,
}

#[idempotent(key = "<run>:ticket:<customer>:<description>")]
async fn open_ticket(
    run: Run,
    customer: u64,
    description: String,
) -> Result<Outcome<u64>, TicketError> {
    Ok(customer)
}

#[idempotent(key = "<run>:refund:<args.order_id>:<args.refund_reason>")]
async fn refund_order(run: Run, args: RefundArgs) -> Result<Outcome<u64>, TicketError> {
    Ok(0)
}

fn main() {}
