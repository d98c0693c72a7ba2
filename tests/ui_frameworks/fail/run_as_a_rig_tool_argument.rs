// Every argument of a `#[rig_tool]` function, other than its
// `&mut ToolContext`, is one the model fills in. A `run` argument there
// would let the model name the run, and so choose which actions count as
// repeats. `Run` has no JSON schema, so rig refuses it: read the run from
// the tool context instead (`idempotent::rig::InRun`, or `run_of`).
use idempotent::{Outcome, Run, idempotent};
use rig_core::rig_tool;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ShopError(#[from] idempotent::Error);

#[rig_tool(description = "Refund an order")]
#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund(run: Run, order_id: String, usd: u64) -> Result<Outcome<u64>, ShopError> {
    Ok(usd)
}

fn main() {}
