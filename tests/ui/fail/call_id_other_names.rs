// The id of one call under the names the model APIs and agent frameworks
// give it: Anthropic's `tool_use_id`, a server's `request_id`, an
// `invocation_id`, and Google ADK's `function_call_id` as a field. Each is new
// on every call, so keying on one gives two identical asks two keys: the
// action would run twice.
use idempotent_tools::{Outcome, Run, idempotent};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<tool_use_id>")]
async fn refund_order(
    run: Run,
    order_id: String,
    tool_use_id: String,
) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

#[idempotent(key = "<run>:cancel:<request_id>")]
async fn cancel_order(
    run: Run,
    order_id: String,
    request_id: String,
) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

#[idempotent(key = "<run>:ship:<invocation_id>")]
async fn ship_order(
    run: Run,
    order_id: String,
    invocation_id: String,
) -> Result<Outcome<u64>, ShopError> {
    Ok(0)
}

#[derive(Serialize)]
struct MailArgs {
    customer: u64,
    function_call_id: String,
}

#[idempotent(key = "<run>:mail:<args.function_call_id>")]
async fn send_mail(run: Run, args: MailArgs) -> Result<Outcome<u64>, ShopError> {
    Ok(args.customer)
}

fn main() {}
