//! A minimal MCP server over stdio, with no guard of its own: the upstream
//! the gateway benchmark (`benches/gateway.rs`) calls, directly and through
//! `idempotent-tools gateway`. It stands for any MCP server, in any
//! language; its tools answer at once, with no I/O, so that what a call
//! costs is the protocol's round trip and nothing else.
//!
//! ```sh
//! cargo build --release -p idempotent-benches --example mcp_upstream
//! ```
//!
//! - `refund_order` (`order_id`, `amount_cents`): the tool the gateway
//!   guards in the benchmark;
//! - `get_order` (`order_id`): a read, passed straight through.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::Deserialize;

/// `refund_order`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// How much, in cents.
    amount_cents: u64,
}

/// `get_order`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct OrderArgs {
    /// The order to look up.
    order_id: String,
}

#[derive(Clone)]
struct Upstream {
    tool_router: ToolRouter<Upstream>,
}

#[tool_router]
impl Upstream {
    fn new() -> Upstream {
        Upstream {
            tool_router: Upstream::tool_router(),
        }
    }

    #[tool(description = "Refund an order")]
    async fn refund_order(&self, Parameters(args): Parameters<RefundArgs>) -> String {
        format!(
            "refunded {} cents on order {}",
            args.amount_cents, args.order_id
        )
    }

    #[tool(description = "Look up an order", annotations(read_only_hint = true))]
    async fn get_order(&self, Parameters(args): Parameters<OrderArgs>) -> String {
        format!("order {}: shipped", args.order_id)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // stdout carries the protocol.
    let server = Upstream::new().serve(rmcp::transport::stdio()).await?;
    server.waiting().await?;
    Ok(())
}
