//! An MCP server with one guarded tool, `refund_order`, for a real MCP
//! client (a desktop assistant, an IDE, the MCP Inspector) to call.
//!
//! ```sh
//! # Over stdio: the client starts the server itself.
//! cargo run -p idempotent-tools-frameworks --example mcp_server -- stdio
//! # Over streamable HTTP at http://127.0.0.1:8000/mcp (or another address).
//! cargo run -p idempotent-tools-frameworks --example mcp_server -- http 127.0.0.1:8000
//! ```
//!
//! Ask the client's model to refund order 1182 twice: the second call comes
//! back with the first refund and a note, and the server's log (stderr)
//! counts one refund at the stand-in provider. Over HTTP a request may name
//! its run in an `Idempotent-Run` header; otherwise the client's session
//! scopes it (2025-11-25), or, for a stateless client (2026-07-28), a run
//! shared server-wide.

use std::net::SocketAddr;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use idempotent_tools::rmcp::{ConnectionRuns, ResolvesRuns, RunHeaderLayer, SessionRuns};
use idempotent_tools::{FreeText, Outcome, Run, idempotent};
use idempotent_tools_testing::{Provider, ProviderError, Refund};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ContentBlock, IntoContents, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use tower_layer::Layer;

/// The tool's arguments, as the model fills them in.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// Dollars to refund.
    usd: u64,
    /// Why, in the model's own words.
    reason: FreeText,
}

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

    #[idempotent(key = "<run>:refund:<args.order_id>")]
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    async fn refund_order(
        &self,
        run: Run,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<Outcome<Refund>, RefundError> {
        let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
        let refund = self
            .provider
            .refund(&args.order_id, args.usd, key.as_deref())
            .await?;
        eprintln!(
            "refunded order {} in run {run}; refunds on file: {}",
            args.order_id,
            self.provider.refunds_on_file()
        );
        Ok(refund)
    }
}

/// The default order: `_meta`, an extension (the header), the principal,
/// the session or connection, then server-wide.
impl ResolvesRuns for Shop {}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let provider = Provider::new();
    match args.next().as_deref() {
        Some("stdio") => {
            // stdout carries the protocol; the log goes to stderr.
            let server = Shop::new(provider)
                .serve(ConnectionRuns::new(rmcp::transport::stdio()))
                .await?;
            server.waiting().await?;
        }
        Some("http") => {
            let address: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:8000").parse()?;
            serve_http(provider, address).await?;
        }
        _ => return Err("usage: mcp_server stdio | mcp_server http [127.0.0.1:8000]".into()),
    }
    Ok(())
}

/// rmcp's streamable HTTP service (a server instance per session, or per
/// request for stateless clients) behind the run header layer, on hyper.
/// With axum: `Router::new().nest_service("/mcp", mcp).layer(RunHeaderLayer::new())`.
async fn serve_http(provider: Provider, address: SocketAddr) -> std::io::Result<()> {
    let mcp = StreamableHttpService::new(
        move || Ok(Shop::new(provider.clone())),
        SessionRuns::new(LocalSessionManager::default()).into(), // sessions rmcp issues are runs
        StreamableHttpServerConfig::default(),
    );
    let service = RunHeaderLayer::new().layer(mcp);
    let listener = tokio::net::TcpListener::bind(address).await?;
    eprintln!(
        "MCP over streamable HTTP at http://{}/mcp",
        listener.local_addr()?
    );
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
