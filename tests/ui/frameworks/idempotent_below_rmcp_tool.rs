// `#[tool]` expands first and turns the `async fn` into a plain `fn` that
// returns a boxed future. The guard can no longer await the store before the
// body, so `#[idempotent]` must say to go above `#[tool]`.
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

impl rmcp::model::IntoContents for ShopError {
    fn into_contents(self) -> Vec<rmcp::model::ContentBlock> {
        vec![rmcp::model::ContentBlock::text(self.to_string())]
    }
}

struct Shop;

#[tool_router]
impl Shop {
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    #[idempotent(key = "<run>:refund:<args.order_id>")]
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
