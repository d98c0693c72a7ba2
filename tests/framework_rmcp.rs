//! `#[idempotent]` in rmcp 3.11: a real MCP client calls a real MCP server
//! over an in-memory duplex pipe. Every test counts the refunds that the
//! test kit's stand-in provider made.
#![cfg(feature = "rmcp")]

mod frameworks_common;

use frameworks_common::{ShopError, provider_key};
use idempotent::rmcp::{STATUS_META_KEY, with_run};
use idempotent::testing::{Provider, Refund};
use idempotent::{FreeText, Outcome, Run, idempotent};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, IntoContents, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A tool's error reaches the client as a tool-level error (`is_error:
/// true`) that the model reads.
impl IntoContents for ShopError {
    fn into_contents(self) -> Vec<ContentBlock> {
        vec![ContentBlock::text(self.to_string())]
    }
}

// ---------------------------------------------------------------------------
// The server.

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// Dollars to refund.
    usd: u64,
    /// Why, in the model's words: never part of the key or the fingerprint.
    reason: FreeText,
}

#[derive(Clone)]
struct Shop {
    provider: Provider,
    /// This server instance's session, for the tool keyed on it.
    session: Run,
    tool_router: ToolRouter<Shop>,
}

#[tool_router]
impl Shop {
    fn new(provider: Provider, session: Run) -> Shop {
        Shop {
            provider,
            session,
            tool_router: Shop::tool_router(),
        }
    }

    /// The run comes with each request (`_meta`), through `run: Run`.
    #[idempotent(key = "<run>:refund:<args.order_id>")]
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    async fn refund_order(
        &self,
        run: Run,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        Ok(self
            .provider
            .refund(&args.order_id, args.usd, provider_key().as_deref())
            .await?)
    }

    /// The run is the server's session, a field of its state.
    #[idempotent(key = "<self.session>:refund:<args.order_id>")]
    #[tool(description = "Refund an order", annotations(idempotent_hint = true))]
    async fn refund_in_session(
        &self,
        Parameters(args): Parameters<RefundArgs>,
    ) -> Result<Outcome<Refund>, ShopError> {
        Ok(self
            .provider
            .refund(&args.order_id, args.usd, provider_key().as_deref())
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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

type Client = RunningService<RoleClient, ()>;

/// Serves `shop` on one end of an in-memory pipe and connects a client to
/// the other.
async fn connect(shop: Shop) -> Client {
    let (server_io, client_io) = tokio::io::duplex(4096);
    tokio::spawn(async move {
        if let Ok(server) = shop.serve(server_io).await {
            let _ = server.waiting().await;
        }
    });
    ().serve(client_io)
        .await
        .unwrap_or_else(|e| panic!("client: {e}"))
}

fn refund(tool: &'static str, order_id: &str, reason: &str) -> CallToolRequestParams {
    let args = json!({ "order_id": order_id, "usd": 42, "reason": reason });
    let Value::Object(args) = args else {
        unreachable!("a JSON object")
    };
    CallToolRequestParams::new(tool).with_arguments(args)
}

fn in_run(params: CallToolRequestParams, run: &str) -> CallToolRequestParams {
    with_run(
        params,
        &Run::new(run).unwrap_or_else(|e| panic!("run: {e}")),
    )
}

fn status(result: &CallToolResult) -> Option<&str> {
    result.meta.as_ref()?.get(STATUS_META_KEY)?.as_str()
}

fn texts(result: &CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect()
}

fn refund_in(result: &CallToolResult) -> Refund {
    let first = texts(result).into_iter().next().unwrap_or_default();
    serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("first block is the refund: {e}: {first}"))
}

fn session(id: &str) -> Run {
    Run::new(id).unwrap_or_else(|e| panic!("run: {e}"))
}

// ---------------------------------------------------------------------------
// The tests.

#[tokio::test(flavor = "multi_thread")]
async fn without_the_guard_two_concurrent_calls_refund_twice() {
    // The control: the two requests really do run at the same time.
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone(), session("mcp-control"))).await;
    let (a, b) = tokio::join!(
        client.call_tool(refund("refund_unguarded", "2180", "customer asked")),
        client.call_tool(refund("refund_unguarded", "2180", "customer asked twice")),
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(provider.refunds_of("2180"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_concurrent_calls_for_the_same_refund_refund_once() {
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone(), session("mcp-unused"))).await;
    let (a, b) = tokio::join!(
        client.call_tool(in_run(
            refund("refund_order", "2181", "customer asked"),
            "mcp-run-1"
        )),
        client.call_tool(in_run(
            refund("refund_order", "2181", "as the customer asked"),
            "mcp-run-1"
        )),
    );
    let a = a.unwrap_or_else(|e| panic!("first call: {e}"));
    let b = b.unwrap_or_else(|e| panic!("second call: {e}"));

    assert_eq!(provider.refunds_of("2181"), 1);
    let mut statuses = [status(&a), status(&b)];
    statuses.sort();
    assert_eq!(statuses, [Some("fresh"), Some("replay")]);
    assert_eq!(
        refund_in(&a),
        refund_in(&b),
        "both calls see the one refund"
    );
    for result in [&a, &b] {
        assert_eq!(result.is_error, Some(false), "a replay is not an error");
    }
    // The replay is the first result, then the note.
    let replay = if status(&a) == Some("replay") { &a } else { &b };
    assert_eq!(texts(replay).len(), 2);
    assert_eq!(texts(replay)[1], idempotent::DEFAULT_REPLAY_NOTE);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_an_injected_failure_refunds_once() {
    let provider = Provider::default();
    provider.lose_next_reply();
    let client = connect(Shop::new(provider.clone(), session("mcp-unused"))).await;

    let failed = client
        .call_tool(in_run(
            refund("refund_order", "2182", "customer asked"),
            "mcp-run-2",
        ))
        .await
        .unwrap_or_else(|e| panic!("a tool failure is still a result: {e}"));
    assert_eq!(failed.is_error, Some(true), "the model reads the failure");
    assert!(texts(&failed)[0].contains("did not answer in time"));

    let retry = client
        .call_tool(in_run(
            refund("refund_order", "2182", "retrying"),
            "mcp-run-2",
        ))
        .await
        .unwrap_or_else(|e| panic!("retry: {e}"));
    assert_eq!(retry.is_error, Some(false));
    assert_eq!(
        refund_in(&retry).id,
        "re_1",
        "the provider kept the refund under the key"
    );
    assert_eq!(provider.refunds_of("2182"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_refund_in_another_run_is_another_refund() {
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone(), session("mcp-unused"))).await;
    for run in ["mcp-run-3", "mcp-run-4", "mcp-run-3"] {
        let result = client
            .call_tool(in_run(refund("refund_order", "2183", "asked"), run))
            .await;
        assert!(result.is_ok());
    }
    assert_eq!(provider.refunds_of("2183"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_names_no_run_is_refused_and_refunds_nothing() {
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone(), session("mcp-unused"))).await;
    let result = client
        .call_tool(refund("refund_order", "2184", "customer asked"))
        .await;

    let Err(ServiceError::McpError(error)) = result else {
        panic!("expected a protocol error, got {result:?}");
    };
    assert!(
        error.message.contains("idempotent/run"),
        "{}",
        error.message
    );
    assert_eq!(provider.refunds_of("2184"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_keyed_on_the_server_session_refunds_once_per_session() {
    let provider = Provider::default();
    let first = connect(Shop::new(provider.clone(), session("mcp-session-1"))).await;
    let (a, b) = tokio::join!(
        first.call_tool(refund("refund_in_session", "2185", "customer asked")),
        first.call_tool(refund("refund_in_session", "2185", "customer asked again")),
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(provider.refunds_of("2185"), 1);

    let second = connect(Shop::new(provider.clone(), session("mcp-session-2"))).await;
    let c = second
        .call_tool(refund("refund_in_session", "2185", "customer asked"))
        .await;
    assert_eq!(c.ok().as_ref().and_then(status), Some("fresh"));
    assert_eq!(provider.refunds_of("2185"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tool_is_listed_with_its_idempotent_hint_and_free_text_as_plain_text() {
    let client = connect(Shop::new(Provider::default(), session("mcp-unused"))).await;
    let tools = client
        .list_all_tools()
        .await
        .unwrap_or_else(|e| panic!("list: {e}"));
    let tool = tools.iter().find(|t| t.name == "refund_order");
    let tool = tool.unwrap_or_else(|| panic!("refund_order is listed"));

    let hint = tool.annotations.as_ref().and_then(|a| a.idempotent_hint);
    assert_eq!(hint, Some(true));
    let schema = Value::Object((*tool.input_schema).clone());
    assert_eq!(schema["properties"]["reason"]["type"], "string");
    assert!(
        schema["properties"].get("run").is_none(),
        "the run is not the model's to give"
    );
}
