// A tool that takes `run: Run` on a server that never says how its tools
// find their run (`impl ResolvesRuns`). rmcp's router alone would report an
// unmet `IntoToolRoute` bound; the attribute names the missing impl first.
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

fn main() {}
