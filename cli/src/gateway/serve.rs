//! The gateway's own side: stdio, or streamable HTTP behind the principal
//! check the configuration asks for.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use idempotent_tools::rmcp::{ConnectionRuns, Principal, RunHeaderLayer, SessionRuns};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq;

use super::GatewayError;
use super::config::Auth;
use super::proxy::Gateway;
use crate::gateway::TARGET;

/// Serves one client on stdin and stdout until it leaves.
pub async fn stdio(gateway: Gateway) -> Result<(), GatewayError> {
    let running = gateway
        .serve(ConnectionRuns::new(rmcp::transport::stdio()))
        .await
        .map_err(|err| GatewayError::Serve(format!("the client's session did not start: {err}")))?;
    running
        .waiting()
        .await
        .map_err(|err| GatewayError::Serve(err.to_string()))?;
    Ok(())
}

/// How an HTTP request's principal is established.
pub struct Principals {
    tokens: Vec<(Vec<u8>, Principal)>,
    header: Option<header::HeaderName>,
}

impl Principals {
    /// Reads `[auth]`, with its tokens' environment variables.
    pub fn from_config(auth: &Auth) -> Result<Principals, GatewayError> {
        let mut tokens = Vec::new();
        for token in &auth.tokens {
            let principal = Principal::new(token.principal.clone()).map_err(|_| {
                GatewayError::Auth("a token in [[auth.tokens]] has an empty `principal`".into())
            })?;
            let secret = match (&token.token, &token.token_env) {
                (Some(secret), None) => secret.clone(),
                (None, Some(var)) => std::env::var(var).map_err(|_| {
                    GatewayError::Auth(format!(
                        "the token of principal `{}` is read from ${var}, which is not set",
                        token.principal
                    ))
                })?,
                _ => {
                    return Err(GatewayError::Auth(format!(
                        "the token of principal `{}` needs exactly one of `token` and \
                         `token_env`",
                        token.principal
                    )));
                }
            };
            if secret.len() < 16 {
                return Err(GatewayError::Auth(format!(
                    "the token of principal `{}` is shorter than 16 characters: anyone could \
                     guess it",
                    token.principal
                )));
            }
            tokens.push((secret.into_bytes(), principal));
        }
        let header = match &auth.principal_header {
            Some(name) => Some(header::HeaderName::try_from(name.as_str()).map_err(|_| {
                GatewayError::Auth(format!(
                    "`principal_header = \"{name}\"` is not a header name"
                ))
            })?),
            None => None,
        };
        Ok(Principals { tokens, header })
    }

    /// Refuses to serve beyond loopback without a way to tell callers
    /// apart.
    pub fn check_listen(&self, listen: SocketAddr) -> Result<(), GatewayError> {
        if self.is_configured() || listen.ip().is_loopback() {
            return Ok(());
        }
        Err(GatewayError::Auth(format!(
            "--listen {listen} is not a loopback address, and the configuration has no [auth]: \
             anyone who can reach it could call the upstream's tools and read their results. Add \
             [[auth.tokens]] or `principal_header` under [auth], or listen on 127.0.0.1"
        )))
    }

    fn is_configured(&self) -> bool {
        !self.tokens.is_empty() || self.header.is_some()
    }

    /// The request's principal; `Err` when the configuration asks for one
    /// and the request proves none.
    fn of(&self, headers: &HeaderMap) -> Result<Option<Principal>, ()> {
        if !self.is_configured() {
            return Ok(None);
        }
        if let Some(bearer) = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
        {
            // Every token is compared, each in constant time.
            let mut found = None;
            for (secret, principal) in &self.tokens {
                if bool::from(secret.as_slice().ct_eq(bearer.trim().as_bytes())) {
                    found = Some(principal.clone());
                }
            }
            return found.map(Some).ok_or(());
        }
        if let Some(name) = &self.header
            && let Some(value) = headers.get(name).and_then(|value| value.to_str().ok())
            && let Ok(principal) = Principal::new(value.trim())
        {
            return Ok(Some(principal));
        }
        Err(())
    }
}

async fn authenticate(
    State(principals): State<Arc<Principals>>,
    mut request: Request,
    next: Next,
) -> Response {
    match principals.of(request.headers()) {
        Ok(Some(principal)) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Ok(None) => next.run(request).await,
        Err(()) => {
            tracing::info!(target: TARGET, "refused a request without valid credentials (401)");
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "this gateway needs a valid bearer token: nothing was done\n",
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
    }
}

/// How the HTTP side is served.
pub struct HttpOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Without sessions.
    pub stateless: bool,
    /// Host names answered beyond loopback.
    pub allow_hosts: Vec<String>,
}

/// Serves streamable HTTP at `/mcp` until the process ends.
pub async fn http(
    make: impl Fn() -> Gateway + Send + Sync + 'static,
    principals: Principals,
    options: HttpOptions,
) -> Result<(), GatewayError> {
    principals.check_listen(options.listen)?;
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = !options.stateless;
    config.allowed_hosts.extend(options.allow_hosts);
    let mcp = StreamableHttpService::new(
        move || Ok(make()),
        SessionRuns::new(LocalSessionManager::default()).into(),
        config,
    );
    let configured = principals.is_configured();
    let app = Router::new()
        .nest_service("/mcp", mcp)
        .layer(RunHeaderLayer::new())
        .layer(middleware::from_fn_with_state(
            Arc::new(principals),
            authenticate,
        ));
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|err| {
            GatewayError::Serve(format!("cannot listen on {}: {err}", options.listen))
        })?;
    let address = listener
        .local_addr()
        .map_err(|err| GatewayError::Serve(err.to_string()))?;
    if configured {
        eprintln!(
            "gateway: serving MCP at http://{address}/mcp; requests must prove a principal ([auth])"
        );
    } else {
        eprintln!(
            "gateway: serving MCP at http://{address}/mcp, on loopback only: the configuration \
             has no [auth], so no request has a principal"
        );
    }
    axum::serve(listener, app)
        .await
        .map_err(|err| GatewayError::Serve(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::Token;

    fn principals(header: Option<&str>) -> Principals {
        let auth = Auth {
            tokens: vec![Token {
                principal: "alice".into(),
                token: Some("alice-token-0123456789".into()),
                token_env: None,
            }],
            principal_header: header.map(str::to_owned),
        };
        Principals::from_config(&auth).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_token_proves_its_principal_and_nothing_else_does() {
        let p = principals(None);
        let alice = p.of(&headers(&[(
            "authorization",
            "Bearer alice-token-0123456789",
        )]));
        assert_eq!(alice, Ok(Some(Principal::new("alice").unwrap())));
        assert_eq!(
            p.of(&headers(&[(
                "authorization",
                "Bearer alice-token-0123456788"
            )])),
            Err(())
        );
        assert_eq!(p.of(&headers(&[])), Err(()));
        // A header only counts where the configuration names it.
        assert_eq!(p.of(&headers(&[("x-user", "mallory")])), Err(()));
    }

    #[test]
    fn a_trusted_proxy_names_the_principal_in_its_header() {
        let p = principals(Some("x-user"));
        assert_eq!(
            p.of(&headers(&[("x-user", "bob")])),
            Ok(Some(Principal::new("bob").unwrap()))
        );
        assert_eq!(p.of(&headers(&[("x-user", "")])), Err(()));
        // A bearer token that does not match is refused, whatever the header says.
        let both = headers(&[
            ("authorization", "Bearer nope-nope-nope-nope"),
            ("x-user", "bob"),
        ]);
        assert_eq!(p.of(&both), Err(()));
    }

    #[test]
    fn without_auth_no_request_has_a_principal_and_only_loopback_is_served() {
        let p = Principals::from_config(&Auth::default()).unwrap();
        assert_eq!(p.of(&headers(&[("authorization", "Bearer x")])), Ok(None));
        assert!(p.check_listen("127.0.0.1:8080".parse().unwrap()).is_ok());
        let err = p.check_listen("0.0.0.0:8080".parse().unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("is not a loopback address"),
            "{err}"
        );
        assert!(
            principals(None)
                .check_listen("0.0.0.0:8080".parse().unwrap())
                .is_ok()
        );
    }

    #[test]
    fn a_short_or_missing_token_is_refused_at_start() {
        let auth = |token: Option<&str>, env: Option<&str>| Auth {
            tokens: vec![Token {
                principal: "alice".into(),
                token: token.map(str::to_owned),
                token_env: env.map(str::to_owned),
            }],
            principal_header: None,
        };
        let err = |auth: Auth| Principals::from_config(&auth).err().unwrap().to_string();
        assert!(err(auth(Some("short"), None)).contains("shorter than 16"));
        assert!(err(auth(None, None)).contains("exactly one of"));
        assert!(err(auth(None, Some("IDEMPOTENT_GATEWAY_TEST_UNSET"))).contains("not set"));
    }
}
