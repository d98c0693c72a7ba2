//! The MCP server the rmcp tests drive, and the clients that drive it: rmcp
//! clients that know nothing of this crate, over an in-memory pipe (as over
//! stdio) or over streamable HTTP on 127.0.0.1.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use http::{HeaderName, HeaderValue, Request};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use idempotent_tools::rmcp::{
    ConnectionRuns, Principal, ResolvesRuns, RunHeaderLayer, RunPolicy, STATUS_META_KEY,
    SessionRuns, with_run,
};
use idempotent_tools::{FreeText, Outcome, Run, idempotent};
use idempotent_tools_testing::{Provider, ProviderError, Refund};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ContentBlock, IntoContents,
    ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::{
    SessionManager, StreamableHttpServerConfig, StreamableHttpService,
    session::local::LocalSessionManager,
};
use rmcp::{
    ClientLifecycleMode, ClientServiceExt, ServerHandler, ServiceExt, schemars, tool, tool_handler,
    tool_router,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tower_layer::Layer;

/// The tools' error: the guard's, or the provider's.
#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// A tool's error reaches the client as a tool-level error (`is_error:
/// true`) that the model reads.
impl IntoContents for ShopError {
    fn into_contents(self) -> Vec<ContentBlock> {
        vec![ContentBlock::text(self.to_string())]
    }
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// Dollars to refund.
    usd: u64,
    /// Why, in the model's words: never part of the key or the fingerprint.
    reason: FreeText,
}

#[derive(Clone)]
pub struct Shop {
    provider: Provider,
    policy: RunPolicy,
    tool_router: ToolRouter<Shop>,
}

#[tool_router]
impl Shop {
    pub fn new(provider: Provider) -> Shop {
        Shop::with_policy(provider, RunPolicy::new())
    }

    pub fn with_policy(provider: Provider, policy: RunPolicy) -> Shop {
        Shop {
            provider,
            policy,
            tool_router: Shop::tool_router(),
        }
    }

    /// The run comes with each request, through `run: Run`.
    #[idempotent(key = "<run>:refund:<args.order_id>")]
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    async fn refund_order(
        &self,
        run: Run,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
        Ok(self
            .provider
            .refund(&args.order_id, args.usd, key.as_deref())
            .await?)
    }

    /// No guard: what most tools look like.
    #[tool(description = "Refund an order")]
    async fn refund_unguarded(
        &self,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<String, ShopError> {
        let refund = self.provider.refund(&args.order_id, args.usd, None).await?;
        Ok(refund.id)
    }
}

impl ResolvesRuns for Shop {
    fn run_policy(&self) -> RunPolicy {
        self.policy
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

pub type Client = RunningService<RoleClient, ClientConfig>;

/// The protocol generation a client speaks.
#[derive(Clone, Copy, Debug)]
pub enum Protocol {
    /// 2025-11-25: `initialize`, then a session.
    Sessions,
    /// 2026-07-28: no `initialize`, no session; every request stands alone.
    Stateless,
}

async fn start<T, E, A>(transport: T, protocol: Protocol) -> Client
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let client = ClientConfig::default();
    let client = match protocol {
        Protocol::Sessions => client.serve(transport).await,
        Protocol::Stateless => {
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            client.serve_with_lifecycle(transport, lifecycle).await
        }
    };
    client.unwrap_or_else(|e| panic!("client ({protocol:?}): {e}"))
}

/// Serves `shop` on one end of an in-memory pipe, as over stdio, and
/// connects a client to the other.
pub async fn connect(shop: Shop, protocol: Protocol) -> Client {
    let (server_io, client_io) = tokio::io::duplex(4096);
    tokio::spawn(async move {
        if let Ok(server) = shop.serve(server_io).await {
            let _ = server.waiting().await;
        }
    });
    start(client_io, protocol).await
}

/// Serves `shop` on one end of an in-memory pipe through
/// [`ConnectionRuns`], as a stdio server does, and connects a client to the
/// other.
pub async fn connect_own_run(shop: Shop, protocol: Protocol) -> Client {
    let (server_io, client_io) = tokio::io::duplex(4096);
    tokio::spawn(async move {
        if let Ok(server) = shop.serve(ConnectionRuns::new(server_io)).await {
            let _ = server.waiting().await;
        }
    });
    start(client_io, protocol).await
}

/// A stand-in for an application's authentication: `Authorization: Bearer
/// <subject>` becomes the request's [`Principal`]. A real server checks the
/// token and takes the subject from its claims.
#[derive(Clone)]
struct BearerAuth<S>(S);

impl<S, B> tower_service::Service<Request<B>> for BearerAuth<S>
where
    S: tower_service::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> S::Future {
        let subject = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .and_then(|subject| Principal::new(subject).ok());
        if let Some(principal) = subject {
            request.extensions_mut().insert(principal);
        }
        self.0.call(request)
    }
}

/// How the HTTP server keeps sessions.
#[derive(Clone, Copy, Debug)]
pub enum Sessions {
    /// rmcp's session manager behind `SessionRuns`: an issued session is a
    /// run.
    Runs,
    /// rmcp's session manager alone: sessions exist, but no tool is told
    /// which were issued.
    Unmarked,
    /// No sessions at all: every request is served statelessly, whatever
    /// `Mcp-Session-Id` it carries.
    Stateless,
}

/// Serves a fresh `Shop` per request or session (as rmcp does) over
/// streamable HTTP on 127.0.0.1, at a port the OS chose, behind the run
/// header layer and the stand-in authentication. Sessions are on for
/// 2025-11-25 clients, and runs; 2026-07-28 clients are always served
/// statelessly.
pub async fn serve_http(provider: Provider, policy: RunPolicy) -> SocketAddr {
    serve_http_with(provider, policy, Sessions::Runs).await
}

/// [`serve_http`], keeping sessions as `sessions` says.
pub async fn serve_http_with(
    provider: Provider,
    policy: RunPolicy,
    sessions: Sessions,
) -> SocketAddr {
    let make = move || Ok(Shop::with_policy(provider.clone(), policy));
    let config = StreamableHttpServerConfig::default().with_json_response(true);
    match sessions {
        Sessions::Runs => {
            let manager = SessionRuns::new(LocalSessionManager::default());
            listen(StreamableHttpService::new(make, manager.into(), config)).await
        }
        Sessions::Unmarked => {
            let manager = LocalSessionManager::default();
            listen(StreamableHttpService::new(make, manager.into(), config)).await
        }
        Sessions::Stateless => {
            let config = config.with_legacy_session_mode(false);
            let manager = LocalSessionManager::default();
            listen(StreamableHttpService::new(make, manager.into(), config)).await
        }
    }
}

async fn listen<M: SessionManager>(mcp: StreamableHttpService<Shop, M>) -> SocketAddr {
    let service = BearerAuth(RunHeaderLayer::new().layer(mcp));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let address = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("address: {e}"));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
        Ok::<(), Infallible>(())
    });
    address
}

/// What a raw HTTP `tools/call` got back: the status, and the JSON-RPC
/// message of a `200`.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub message: Option<Value>,
}

impl RawAnswer {
    /// The tool result's `_meta["idempotent/status"]`.
    pub fn guard_status(&self) -> Option<&str> {
        self.message.as_ref()?["result"]["_meta"][STATUS_META_KEY].as_str()
    }

    /// The JSON-RPC error's message, if the call was refused.
    pub fn error(&self) -> Option<&str> {
        self.message.as_ref()?["error"]["message"].as_str()
    }
}

/// Posts a `tools/call` for a refund straight over HTTP/1.1, as a client
/// written by hand (or a proxy) would, with no `initialize` and whatever
/// headers and `_meta` it likes: protocol 2025-11-25 and older, so a server
/// with sessions expects an `Mcp-Session-Id` it issued.
pub async fn post_refund(
    address: SocketAddr,
    headers: &[(&str, &str)],
    meta: Option<Value>,
    order_id: &str,
) -> RawAnswer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut params = json!({
        "name": "refund_order",
        "arguments": { "order_id": order_id, "usd": 42, "reason": "customer asked" },
    });
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let body =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         Connection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);

    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    stream
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .unwrap_or_else(|e| panic!("receive: {e}"));
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {response}"));
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    // A chunked body: the JSON message is the line that starts with `{`.
    let message = body
        .lines()
        .find(|line| line.starts_with('{'))
        .and_then(|line| serde_json::from_str(line).ok());
    RawAnswer { status, message }
}

/// What an HTTP client sends with every request besides MCP itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct Headers<'a> {
    /// The `Idempotent-Run` header.
    pub run: Option<&'a str>,
    /// The bearer token's subject.
    pub principal: Option<&'a str>,
}

/// An rmcp client of the server at `address`, over streamable HTTP.
pub async fn connect_http(address: SocketAddr, protocol: Protocol, headers: Headers<'_>) -> Client {
    let mut custom = HashMap::new();
    if let Some(run) = headers.run {
        custom.insert(
            HeaderName::from_static("idempotent-run"),
            HeaderValue::from_str(run).unwrap_or_else(|e| panic!("header: {e}")),
        );
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://{address}/mcp"))
        .custom_headers(custom);
    config.auth_header = headers.principal.map(str::to_owned);
    start(StreamableHttpClientTransport::from_config(config), protocol).await
}

/// A `tools/call` request for a refund of $42, as an ordinary client sends
/// it: arguments only, no `_meta`.
pub fn refund(tool: &'static str, order_id: &str, reason: &str) -> CallToolRequestParams {
    let args = json!({ "order_id": order_id, "usd": 42, "reason": reason });
    let Value::Object(args) = args else {
        unreachable!("a JSON object")
    };
    CallToolRequestParams::new(tool).with_arguments(args)
}

/// The same request, naming its run in `_meta`.
pub fn in_run(params: CallToolRequestParams, run: &str) -> CallToolRequestParams {
    with_run(
        params,
        &Run::new(run).unwrap_or_else(|e| panic!("run: {e}")),
    )
}

/// Calls the tool and expects a tool result, not a protocol error.
pub async fn call(client: &Client, params: CallToolRequestParams) -> CallToolResult {
    client
        .call_tool(params)
        .await
        .unwrap_or_else(|e| panic!("tools/call: {e}"))
}

pub fn status(result: &CallToolResult) -> Option<&str> {
    result.meta.as_ref()?.get(STATUS_META_KEY)?.as_str()
}

pub fn texts(result: &CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect()
}

pub fn refund_in(result: &CallToolResult) -> Refund {
    let first = texts(result).into_iter().next().unwrap_or_default();
    serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("first block is the refund: {e}: {first}"))
}
