// `<run>` with no `run: Run` argument reads the run in scope, which rmcp's
// tools never see: every call would fail at run time. Under `#[tool]` it is
// a compile error that says which argument to add.
use idempotent_tools::{Outcome, idempotent};
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
    #[idempotent(key = "<run>:refund:<args.order_id>")]
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    async fn refund_order(
        &self,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<Outcome<u64>, ShopError> {
        Ok(args.usd)
    }
}

impl idempotent_tools::rmcp::ResolvesRuns for Shop {}

fn main() {}
