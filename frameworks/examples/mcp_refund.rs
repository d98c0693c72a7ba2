//! `#[idempotent]` in an MCP server built with rmcp 3.11, called by a real
//! rmcp client over an in-memory pipe. The client, like most, sends no run:
//! the connection is the run. (`mcp_server` serves the same tool to a real
//! MCP client over stdio or streamable HTTP.)
//!
//! The client sends two `tools/call` requests for the same refund at the
//! same time, and the provider loses its reply to the first one to reach it.
//! The client then retries the call that failed. The stand-in provider
//! counts the refunds it made.
//!
//! ```sh
//! cargo run -p idempotent-tools-frameworks --example mcp_refund
//! ```

use idempotent_tools::rmcp::{ResolvesRuns, STATUS_META_KEY};
use idempotent_tools::{FreeText, Outcome, Run, idempotent};
use idempotent_tools_testing::{Provider, ProviderError, Refund};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, IntoContents, ServerCapabilities,
    ServerConfig,
};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The tool's arguments, as the model fills them in.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// Dollars to refund.
    usd: u64,
    /// Why, in the model's own words. Free text never enters the key or the
    /// fingerprint, so a reworded repeat is still a repeat.
    reason: FreeText,
}

/// The tool's error. As `IntoContents`, it reaches the client as a tool
/// result with `is_error: true`, which the model reads.
#[derive(Debug, thiserror::Error)]
enum RefundError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

impl IntoContents for RefundError {
    fn into_contents(self) -> Vec<ContentBlock> {
        vec![ContentBlock::text(self.to_string())]
    }
}

#[derive(Clone)]
struct Shop {
    provider: Provider,
    tool_router: ToolRouter<Shop>,
}

#[tool_router]
impl Shop {
    fn new(provider: Provider) -> Shop {
        Shop {
            provider,
            tool_router: Shop::tool_router(),
        }
    }

    /// `#[idempotent]` goes above `#[tool]`. The run comes with each request,
    /// since rmcp runs each request on its own task, where no run scope
    /// reaches: `run: Run` resolves it from `_meta["idempotent/run"]`, a run
    /// the application set, the caller's principal, its session or
    /// connection, else a server-wide run.
    #[idempotent(key = "<run>:refund:<args.order_id>")]
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    async fn refund_order(
        &self,
        run: Run,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<Outcome<Refund>, RefundError> {
        let _ = run;
        // The guard's key is also the provider's idempotency key.
        let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
        Ok(self
            .provider
            .refund(&args.order_id, args.usd, key.as_deref())
            .await?)
    }
}

/// The default order for resolving the run of `run: Run`.
impl ResolvesRuns for Shop {}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let provider = Provider::new();
    let (server_io, client_io) = tokio::io::duplex(4096);
    let server = Shop::new(provider.clone()).serve(server_io);
    let (server, client) = tokio::join!(server, ().serve(client_io));
    let (server, client) = (server?, client?);

    let refund = |reason: &str| {
        let args = json!({ "order_id": "1182", "usd": 42, "reason": reason });
        let args = args.as_object().cloned().unwrap_or_default();
        CallToolRequestParams::new("refund_order").with_arguments(args)
    };

    println!("MCP: two concurrent calls refund order 1182; the provider loses its first reply.\n");
    provider.lose_next_reply();
    let (a, b) = tokio::join!(
        client.call_tool(refund("customer asked")),
        client.call_tool(refund("the customer wants a refund")),
    );
    // Which of the two reaches the provider first is up to the scheduler.
    let mut first_two = [a?, b?];
    first_two.sort_by_key(|result| !result.is_error.unwrap_or(false));
    for result in &first_two {
        println!("  concurrent call  {}", describe(result));
    }
    let retry = client.call_tool(refund("trying again")).await?;
    println!("  retry            {}", describe(&retry));
    println!(
        "\n  refunds on file: {} (refund calls that reached the provider: {})",
        provider.refunds_on_file(),
        provider.calls_received()
    );

    client.cancel().await?;
    server.cancel().await?;
    Ok(())
}

/// One line for a tool result: error or status, then each content block.
fn describe(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    let status = match result.is_error {
        Some(true) => "error",
        _ => result
            .meta
            .as_ref()
            .and_then(|meta| meta.get(STATUS_META_KEY))
            .and_then(|status| status.as_str())
            .unwrap_or("?"),
    };
    format!("{status:<7} {}", texts.join("  |  "))
}
