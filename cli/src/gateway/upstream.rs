//! The upstream: the MCP server the gateway stands in front of, as a child
//! process over stdio or a streamable HTTP endpoint, and what it sends
//! back on its own (progress, list changes, log messages).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use idempotent_tools::rmcp::{KEY_META_KEY, RUN_META_KEY};
use rmcp::model::{
    ClientConfig, ClientJsonRpcMessage, ClientRequest, ClientResult, ErrorCode, ErrorData, GetMeta,
    Implementation, ServerNotification, ServerRequest,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, Service, ServiceExt};
use sse_stream::{Error as SseError, Sse};

use super::hub::Hub;

/// Where the upstream is.
#[derive(Debug, Clone)]
pub enum UpstreamAddress {
    /// A program serving MCP on its stdin and stdout.
    Command(Vec<String>),
    /// A streamable HTTP endpoint.
    Url(String),
}

impl std::fmt::Display for UpstreamAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamAddress::Command(command) => write!(f, "`{}`", command.join(" ")),
            UpstreamAddress::Url(url) => write!(f, "{url}"),
        }
    }
}

/// The gateway's client session with the upstream.
pub type Upstream = RunningService<RoleClient, UpstreamClient>;

/// Connects and initializes.
pub async fn connect(address: &UpstreamAddress, hub: Arc<Hub>) -> Result<Upstream, String> {
    let client = UpstreamClient { hub };
    match address {
        UpstreamAddress::Command(command) => {
            let Some((program, args)) = command.split_first() else {
                return Err("the upstream command is empty".to_owned());
            };
            let mut process = tokio::process::Command::new(program);
            process.args(args);
            let transport = TokioChildProcess::builder(process)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map(|(transport, _)| transport)
                .map_err(|err| format!("could not be started: {err}"))?;
            client
                .serve(transport)
                .await
                .map_err(|err| format!("did not initialize: {err}"))
        }
        UpstreamAddress::Url(url) => {
            let transport = StreamableHttpClientTransport::with_client(
                KeyedHttp(reqwest::Client::new()),
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            client
                .serve(transport)
                .await
                .map_err(|err| format!("did not initialize: {err}"))
        }
    }
}

/// The gateway as the upstream's client: it answers pings, refuses the
/// requests it cannot hand to one of its own clients (sampling, roots,
/// elicitation: one upstream session serves them all), and hands the
/// upstream's notifications to the hub.
pub struct UpstreamClient {
    hub: Arc<Hub>,
}

impl Service<RoleClient> for UpstreamClient {
    async fn handle_request(
        &self,
        request: ServerRequest,
        _: RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        match request {
            ServerRequest::PingRequest(_) => Ok(ClientResult::empty(())),
            other => Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "{other:?} is not passed through: the gateway holds one session with this \
                     server for all of its clients"
                ),
                None,
            )),
        }
    }

    async fn handle_notification(
        &self,
        notification: ServerNotification,
        context: NotificationContext<RoleClient>,
    ) -> Result<(), ErrorData> {
        self.hub.from_upstream(notification, context.peer).await;
        Ok(())
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info =
            Implementation::new("idempotent-tools-gateway", env!("CARGO_PKG_VERSION"));
        info
    }
}

/// reqwest as rmcp's streamable HTTP client, that also sends a guarded
/// call's key as the `Idempotency-Key` header of its request, for HTTP
/// upstreams that deduplicate on it.
#[derive(Clone)]
struct KeyedHttp(reqwest::Client);

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The key the gateway put in a `tools/call` request's `_meta`, as a
/// header.
fn with_key(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if let ClientJsonRpcMessage::Request(request) = message
        && let ClientRequest::CallToolRequest(_) = &request.request
        && let Some(key) = request
            .request
            .get_meta()
            .get(KEY_META_KEY)
            .and_then(|key| key.as_str())
        && let Ok(value) = HeaderValue::from_str(key)
    {
        headers.insert(IDEMPOTENCY_KEY, value);
    }
    headers
}

type HttpError = StreamableHttpError<reqwest::Error>;

impl StreamableHttpClient for KeyedHttp {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, HttpError>> + Send + '_ {
        let headers = with_key(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: rmcp::transport::streamable_http_client::StreamableHttpResponseLimits,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, HttpError>> + Send + '_ {
        let headers = with_key(&message, custom_headers);
        self.0.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            limits,
        )
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), HttpError>> + Send + '_ {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, HttpError>> + Send + '_
    {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, HttpError>> + Send + '_
    {
        self.0.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
    }
}

/// The `_meta` of a request the gateway forwards: what the client sent,
/// less what belongs to the client's own hop (the protocol's inline
/// metadata, its progress token, which the gateway replaces, and the run,
/// which is the gateway's).
pub fn forwarded_meta(meta: &rmcp::model::RequestMetaObject) -> rmcp::model::RequestMetaObject {
    let mut forwarded = rmcp::model::RequestMetaObject::new();
    for (name, value) in meta.iter() {
        if name == "progressToken"
            || name == RUN_META_KEY
            || name == KEY_META_KEY
            || name.starts_with("io.modelcontextprotocol/")
        {
            continue;
        }
        forwarded.insert(name.clone(), value.clone());
    }
    forwarded
}
