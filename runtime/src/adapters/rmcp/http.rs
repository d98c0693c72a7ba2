//! A tower layer that names the run of streamable HTTP requests from a
//! header.
//!
//! rmcp's streamable HTTP server keeps each HTTP request's
//! [`http::request::Parts`], extensions included, in the MCP request's
//! extensions, where [`run_of`](super::run_of) looks. So a layer in front of
//! rmcp's `StreamableHttpService` (in axum, hyper or any tower stack) can
//! scope calls by anything it reads from the HTTP request.

use std::task::{Context, Poll};

use http::{HeaderName, Request};
use tower_layer::Layer;
use tower_service::Service;

use crate::run::Run;

/// The header [`RunHeaderLayer`] reads by default: `Idempotent-Run: run-7`.
pub const RUN_HEADER: HeaderName = HeaderName::from_static("idempotent-run");

/// What [`RunHeader`] read, in the request's extensions: a type of its own,
/// so that a header's run is never taken for a [`Run`] the application set.
#[derive(Clone, Debug)]
pub(super) enum HeaderRun {
    /// The run the header names, as the client wrote it.
    Named(Run),
    /// The header is there but names no run (it holds the header's name), so
    /// the call is refused rather than scoped more widely than its sender
    /// meant.
    Invalid(String),
}

/// Reads the run of each HTTP request from a header, for a `run: Run` tool
/// parameter to find ([`RunSource::Extension`](super::RunSource::Extension)).
/// The run is the header's text tagged as a header's (`header/run-7`), and
/// nested under the request's [`Principal`](super::Principal) if it has one.
///
/// For clients, gateways and agent hosts that can set a header but not an
/// MCP request's `_meta`. A request without the header is left alone, and
/// its run is resolved from the next source.
///
/// ```
/// use idempotent_tools::rmcp::RunHeaderLayer;
/// use tower_layer::Layer;
///
/// # fn wrap<S>(mcp_service: S) {
/// // In axum: `Router::new().nest_service("/mcp", mcp).layer(RunHeaderLayer::new())`.
/// let service = RunHeaderLayer::new().layer(mcp_service);
/// # let _ = service; }
/// ```
#[derive(Clone, Debug)]
pub struct RunHeaderLayer {
    header: HeaderName,
}

impl RunHeaderLayer {
    /// Reads [`RUN_HEADER`].
    pub fn new() -> RunHeaderLayer {
        RunHeaderLayer { header: RUN_HEADER }
    }

    /// Reads `header` instead, for a deployment whose clients already send
    /// their conversation's id under another name.
    pub fn header(header: HeaderName) -> RunHeaderLayer {
        RunHeaderLayer { header }
    }
}

impl Default for RunHeaderLayer {
    fn default() -> RunHeaderLayer {
        RunHeaderLayer::new()
    }
}

impl<S> Layer<S> for RunHeaderLayer {
    type Service = RunHeader<S>;

    fn layer(&self, inner: S) -> RunHeader<S> {
        RunHeader {
            inner,
            header: self.header.clone(),
        }
    }
}

/// The service [`RunHeaderLayer`] makes: `inner`, with each request's run
/// header read into a [`Run`] extension.
#[derive(Clone, Debug)]
pub struct RunHeader<S> {
    inner: S,
    header: HeaderName,
}

impl<S, B> Service<Request<B>> for RunHeader<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> S::Future {
        if let Some(value) = request.headers().get(&self.header) {
            let run = match value.to_str().ok().and_then(|text| Run::new(text).ok()) {
                Some(run) => HeaderRun::Named(run),
                None => HeaderRun::Invalid(self.header.as_str().to_owned()),
            };
            request.extensions_mut().insert(run);
        }
        self.inner.call(request)
    }
}
