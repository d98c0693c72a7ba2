//! The gateway as its clients' MCP server: every request is passed to the
//! upstream as it came, but for `tools/list`, where guarded tools are
//! marked idempotent and refused ones hidden, and `tools/call` of a guarded
//! tool, which goes through the claim-first guard.

// Logging and resource subscriptions are deprecated in the newest protocol
// and still passed through for clients on the older ones.
#![allow(deprecated)]

use std::sync::Arc;

use idempotent_tools::call::Call;
use idempotent_tools::rmcp::{KEY_META_KEY, RunPolicy, STATUS_META_KEY, run_of};
use idempotent_tools::store::Store;
use idempotent_tools::{Classify, Error, Failure, Outcome};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification,
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, ContentBlock,
    CustomNotification, CustomRequest, CustomResult, ErrorCode, ErrorData, GetPromptRequest,
    GetPromptRequestParams, GetPromptResponse, InitializeRequestParams, InitializeResult,
    ListPromptsRequest, ListPromptsResult, ListResourceTemplatesRequest,
    ListResourceTemplatesResult, ListResourcesRequest, ListResourcesResult, ListToolsRequest,
    ListToolsResult, MetaObject, PaginatedRequestParams, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, ServerResult, SetLevelRequest,
    SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams, ToolAnnotations,
    UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{RoleClient, RoleServer, ServerHandler};
use serde_json::Value;

use super::config::ToolErrors;
use super::hub::Hub;
use super::tools::{GuardedTool, Route};
use super::upstream::forwarded_meta;

/// One client session's server.
#[derive(Clone)]
pub struct Gateway {
    hub: Arc<Hub>,
    upstream: Peer<RoleClient>,
    info: ServerConfig,
    store: Arc<dyn Store>,
    runs: RunPolicy,
}

impl Gateway {
    /// A server for the upstream's tools, guarding the hub's.
    pub fn new(
        hub: Arc<Hub>,
        upstream: Peer<RoleClient>,
        store: Arc<dyn Store>,
        runs: RunPolicy,
    ) -> Gateway {
        let mut capabilities = upstream
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default();
        // The gateway says when a re-check refuses a tool.
        let tools = capabilities.tools.get_or_insert_with(Default::default);
        tools.list_changed = Some(true);
        let mut info = ServerConfig::new(capabilities);
        if let Some(upstream) = upstream.peer_info() {
            info.server_info = upstream.server_info.clone().unwrap_or(info.server_info);
            info.instructions = upstream.instructions.clone();
        }
        Gateway {
            hub,
            upstream,
            info,
            store,
            runs,
        }
    }

    /// Passes a request to the upstream as it came, with the client's
    /// progress token routed back and its cancellation passed on.
    async fn forward(
        &self,
        request: ClientRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let options = PeerRequestOptions::no_options().with_meta(forwarded_meta(&context.meta));
        let mut handle = self
            .upstream
            .send_cancellable_request(request, options)
            .await
            .map_err(upstream_error)?;
        let _route = context.meta.get_progress_token().map(|token| {
            self.hub
                .route_progress(handle.progress_token.clone(), context.peer.clone(), token)
        });
        tokio::select! {
            answer = &mut handle.rx => answer
                .map_err(|_| upstream_error(ServiceError::TransportClosed))?
                .map_err(upstream_error),
            () = context.ct.cancelled() => {
                let _ = handle.cancel(Some("the client cancelled the request".to_owned())).await;
                Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "the client cancelled the request", None))
            }
        }
    }

    async fn list(
        &self,
        request: ClientRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let mut answer = self.forward(request, context).await?;
        if let ServerResult::ListToolsResult(list) = &mut answer {
            let tools = self.hub.tools();
            list.tools.retain(|tool| !tools.is_refused(&tool.name));
            for tool in &mut list.tools {
                if tools.is_guarded(&tool.name) {
                    tool.annotations
                        .get_or_insert_with(ToolAnnotations::default)
                        .idempotent_hint = Some(true);
                }
            }
        }
        Ok(answer)
    }

    async fn call(
        &self,
        request: CallToolRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        match self.hub.tools().route(&request.params.name) {
            Route::PassThrough => {
                self.forward(ClientRequest::CallToolRequest(request), &context)
                    .await
            }
            Route::Refused(why) => Err(ErrorData::invalid_request(
                format!(
                    "`{}` is guarded, and its configuration no longer passes its check against \
                     the server's schema, so it is refused rather than run unguarded; nothing \
                     was done: {why}",
                    request.params.name
                ),
                None,
            )),
            Route::Guarded(tool) => self.guarded(tool, request.params, context).await,
        }
    }

    /// A guarded tool's call: claimed under its key first, then passed to
    /// the upstream with the key, or answered with the first result.
    async fn guarded(
        &self,
        tool: Arc<GuardedTool>,
        mut params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let run = run_of(&context, &self.runs)?;
        let arguments = params.arguments.clone().unwrap_or_default();
        let key = tool
            .key(&run, &arguments)
            .map_err(|err| ErrorData::invalid_params(err.to_string(), None))?;
        let fingerprint = tool
            .fingerprint(&arguments)
            .map_err(|err| ErrorData::invalid_params(format!("{err}; nothing was done"), None))?;
        params.meta = None;
        let upstream = self.upstream.clone();
        let hub = self.hub.clone();
        let meta = forwarded_meta(&context.meta);
        let progress = context.meta.get_progress_token();
        let client = context.peer.clone();
        let tool_errors = tool.tool_errors;
        let action = async move {
            let mut meta = meta;
            if let Some(key) = idempotent_tools::current_key() {
                meta.insert(KEY_META_KEY.into(), key.provider_key().into_owned().into());
            }
            let options = PeerRequestOptions::no_options().with_meta(meta);
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let mut handle = upstream
                .send_cancellable_request(request, options)
                .await
                .map_err(ActionError::Send)?;
            let _route = progress
                .map(|token| hub.route_progress(handle.progress_token.clone(), client, token));
            let answer = (&mut handle.rx)
                .await
                .map_err(|_| ActionError::Lost(ServiceError::TransportClosed))?
                .map_err(ActionError::Lost)?;
            let ServerResult::CallToolResult(result) = answer else {
                return Err(ActionError::Lost(ServiceError::UnexpectedResponse));
            };
            match (result.is_error, tool_errors) {
                (Some(true), ToolErrors::Unknown) => {
                    Err(ActionError::Tool(result, Failure::Unknown))
                }
                (Some(true), ToolErrors::Definite) => {
                    Err(ActionError::Tool(result, Failure::Definite))
                }
                _ => serde_json::to_value(&result).map_err(|err| {
                    ActionError::Lost(ServiceError::McpError(ErrorData::internal_error(
                        err.to_string(),
                        None,
                    )))
                }),
            }
        };
        let outcome = Call::new(tool.id.clone(), key)
            .fingerprint(fingerprint)
            .policy(tool.policy.clone())
            .store(self.store.clone())
            .run_classified(action)
            .await;
        answer(outcome).map(ServerResult::CallToolResult)
    }
}

/// Why the upstream's side of a guarded call failed.
#[derive(Debug, thiserror::Error)]
enum ActionError {
    /// The guard refused or failed.
    #[error(transparent)]
    Guard(#[from] Error),
    /// The request could not be handed to the upstream.
    #[error("the request could not be sent to the upstream: {0}")]
    Send(#[source] ServiceError),
    /// The request was sent, and no result came back.
    #[error("the upstream did not answer: {0}")]
    Lost(#[source] ServiceError),
    /// The tool answered with an error result.
    #[error("the tool failed")]
    Tool(CallToolResult, Failure),
}

impl Classify for ActionError {
    fn failure(&self) -> Failure {
        match self {
            ActionError::Guard(_) => Failure::Definite,
            // Never handed to the transport.
            ActionError::Send(ServiceError::TransportClosed) => Failure::Definite,
            ActionError::Send(_) => Failure::Unknown,
            ActionError::Lost(ServiceError::McpError(err)) if refused_before_acting(err) => {
                Failure::Definite
            }
            ActionError::Lost(_) => Failure::Unknown,
            ActionError::Tool(_, failure) => *failure,
        }
    }
}

/// Whether the server refused the request itself, before any tool ran: it
/// named no tool, or arguments the schema refuses, or was not a request.
fn refused_before_acting(err: &ErrorData) -> bool {
    [
        ErrorCode::INVALID_PARAMS,
        ErrorCode::METHOD_NOT_FOUND,
        ErrorCode::INVALID_REQUEST,
        ErrorCode::PARSE_ERROR,
    ]
    .contains(&err.code)
}

/// A guarded call's outcome as the client reads it: a result whose
/// `_meta` says what the gateway did.
fn answer(outcome: Result<Outcome<Value>, ActionError>) -> Result<CallToolResult, ErrorData> {
    match outcome {
        Ok(Outcome::Fresh { value }) => Ok(with_status(stored(value)?, "fresh")),
        Ok(Outcome::Replay { value, note }) => {
            let mut result = stored(value)?;
            result.content.push(ContentBlock::text(note.as_ref()));
            Ok(with_status(result, "replay"))
        }
        Ok(Outcome::Conflict { first, note, .. }) => {
            let mut result = match first {
                Some(first) => stored(first)?,
                None => CallToolResult::success(Vec::new()),
            };
            result.content.push(ContentBlock::text(note.as_ref()));
            Ok(with_status(result, "conflict"))
        }
        Err(ActionError::Tool(mut result, failure)) => {
            let status = match failure {
                Failure::Definite => "released",
                _ => {
                    result.content.push(ContentBlock::text(
                        "This action may have taken effect before it failed, so it will not \
                         be run again: its outcome is recorded as unknown until someone checks \
                         with the provider.",
                    ));
                    "unknown"
                }
            };
            Ok(with_status(result, status))
        }
        Err(ActionError::Guard(err)) => match err {
            Error::MissingRun | Error::Run(_) | Error::Key(_) => {
                Err(ErrorData::invalid_params(err.to_string(), None))
            }
            Error::UnknownOutcome { .. } => Ok(error_result(&err, "unknown")),
            Error::InProgress { .. } => Ok(error_result(&err, "in-progress")),
            other => Ok(error_result(&other, "error")),
        },
        Err(err @ ActionError::Send(_)) => {
            let status = if err.failure() == Failure::Definite {
                "released"
            } else {
                "unknown"
            };
            Ok(error_result(&err, status))
        }
        // The server refused the request before any tool ran: its error,
        // as it sent it.
        Err(ActionError::Lost(ServiceError::McpError(err))) if refused_before_acting(&err) => {
            Err(err)
        }
        // Any other error after the request went out may follow the action.
        Err(err @ ActionError::Lost(_)) => Ok(error_result(&err, "unknown")),
    }
}

/// A result the store kept, read back.
fn stored(value: Value) -> Result<CallToolResult, ErrorData> {
    serde_json::from_value(value).map_err(|err| {
        ErrorData::internal_error(
            format!("the recorded result could not be read: {err}; the action ran once"),
            None,
        )
    })
}

fn with_status(mut result: CallToolResult, status: &'static str) -> CallToolResult {
    result
        .meta
        .get_or_insert_with(MetaObject::new)
        .insert(STATUS_META_KEY.into(), status.into());
    result
}

fn error_result(err: &dyn std::fmt::Display, status: &'static str) -> CallToolResult {
    with_status(
        CallToolResult::error(vec![ContentBlock::text(err.to_string())]),
        status,
    )
}

/// The upstream's error as the client gets it: a JSON-RPC error the
/// upstream sent as it is, any other failure as an internal error.
fn upstream_error(err: ServiceError) -> ErrorData {
    match err {
        ServiceError::McpError(err) => err,
        other => ErrorData::internal_error(format!("the upstream did not answer: {other}"), None),
    }
}

/// Takes the result a request expects out of the upstream's answer.
macro_rules! expect {
    ($answer:expr, $($variant:ident)|+ => $wrap:expr) => {
        match $answer? {
            $(ServerResult::$variant(result) => Ok($wrap(result)),)+
            _ => Err(upstream_error(ServiceError::UnexpectedResponse)),
        }
    };
}

/// Every request passes to the upstream as it came, but for `tools/list`
/// and `tools/call`; rmcp answers `initialize` from [`ServerHandler::get_info`],
/// which is the upstream's, and shapes each result for the client's
/// protocol version.
impl ServerHandler for Gateway {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        self.hub.join(context.peer.clone());
        self.negotiate_initialize(&request)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let answer = self
            .forward(
                ClientRequest::CompleteRequest(CompleteRequest::new(request)),
                &context,
            )
            .await;
        expect!(answer, CompleteResult => |r| r)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(
            ClientRequest::SetLevelRequest(SetLevelRequest::new(request)),
            &context,
        )
        .await
        .map(drop)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let answer = self
            .forward(
                ClientRequest::GetPromptRequest(GetPromptRequest::new(request)),
                &context,
            )
            .await;
        match answer? {
            ServerResult::GetPromptResult(result) => Ok(GetPromptResponse::Complete(result)),
            ServerResult::InputRequiredResult(result) => {
                Ok(GetPromptResponse::InputRequired(result))
            }
            _ => Err(upstream_error(ServiceError::UnexpectedResponse)),
        }
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let request = ListPromptsRequest {
            params: request,
            ..Default::default()
        };
        let answer = self
            .forward(ClientRequest::ListPromptsRequest(request), &context)
            .await;
        expect!(answer, ListPromptsResult => |r| r)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let request = ListResourcesRequest {
            params: request,
            ..Default::default()
        };
        let answer = self
            .forward(ClientRequest::ListResourcesRequest(request), &context)
            .await;
        expect!(answer, ListResourcesResult => |r| r)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let request = ListResourceTemplatesRequest {
            params: request,
            ..Default::default()
        };
        let answer = self
            .forward(
                ClientRequest::ListResourceTemplatesRequest(request),
                &context,
            )
            .await;
        expect!(answer, ListResourceTemplatesResult => |r| r)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let answer = self
            .forward(
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(request)),
                &context,
            )
            .await;
        match answer? {
            ServerResult::ReadResourceResult(result) => Ok(ReadResourceResponse::Complete(result)),
            ServerResult::InputRequiredResult(result) => {
                Ok(ReadResourceResponse::InputRequired(result))
            }
            _ => Err(upstream_error(ServiceError::UnexpectedResponse)),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(
            ClientRequest::SubscribeRequest(SubscribeRequest::new(request)),
            &context,
        )
        .await
        .map(drop)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(
            ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(request)),
            &context,
        )
        .await
        .map(drop)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match self.call(CallToolRequest::new(request), context).await? {
            ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
            ServerResult::InputRequiredResult(result) => {
                Ok(CallToolResponse::InputRequired(result))
            }
            _ => Err(upstream_error(ServiceError::UnexpectedResponse)),
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let request = ListToolsRequest {
            params: request,
            ..Default::default()
        };
        let answer = self
            .list(ClientRequest::ListToolsRequest(request), &context)
            .await;
        expect!(answer, ListToolsResult => |r| r)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let answer = self
            .forward(ClientRequest::CustomRequest(request), &context)
            .await;
        expect!(answer, CustomResult => |r| r)
    }

    async fn on_roots_list_changed(&self, _: NotificationContext<RoleServer>) {
        let notification = ClientNotification::RootsListChangedNotification(Default::default());
        let _ = self.upstream.send_notification(notification).await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _: NotificationContext<RoleServer>,
    ) {
        let notification = ClientNotification::CustomNotification(notification);
        let _ = self.upstream.send_notification(notification).await;
    }

    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }
}
