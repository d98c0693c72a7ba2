// The tool's error type has no `IntoContents`, so rmcp cannot turn an error
// into the tool's result. rmcp's router alone would report an unmet
// `IntoToolRoute` bound; the attribute names the error type and the trait.
use idempotent_tools::{Outcome, Run, idempotent};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{schemars, tool, tool_router};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    order_id: String,
    usd: u64,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ShopError(#[from] idempotent_tools::Error);

struct Shop;

#[tool_router]
impl Shop {
    #[idempotent(key = "<run>:refund:<args.order_id>")]
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    async fn refund_order(
        &self,
        run: Run,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<Outcome<u64>, ShopError> {
        Ok(args.usd)
    }
}

impl idempotent_tools::rmcp::ResolvesRuns for Shop {}

fn main() {}
