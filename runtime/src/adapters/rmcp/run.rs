//! The run of a `tools/call` request, resolved from what the request
//! carries, in a fixed order.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ::rmcp::ErrorData;
use ::rmcp::RoleServer;
use ::rmcp::handler::server::common::FromContextPart;
use ::rmcp::handler::server::tool::ToolCallContext;
use ::rmcp::model::Extensions;
use ::rmcp::service::RequestContext;

use super::http::HeaderRun;
use super::policy::{RunPolicy, RunSource, Unscoped};
use super::session::session_run;
use super::{RUN_META_KEY, SERVER_WIDE_RUN};
use crate::observe::TARGET;
use crate::run::Run;

/// Why a request has no run. Nothing was done: the tool did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestRunError {
    /// `_meta["idempotent/run"]` is there but is not a non-empty string.
    #[error(
        "`_meta.{RUN_META_KEY}` must be a non-empty string naming the agent run, so that \
         repeats within it act once; nothing was done"
    )]
    BadMeta,
    /// The run header is there but empty or not text.
    #[error(
        "the `{0}` header must name the agent run as non-empty text, so that repeats within \
         it act once; nothing was done"
    )]
    BadHeader(String),
    /// The server refuses requests that none of its allowed sources scope.
    #[error(
        "this tool acts once per run, and this server found none for the request: send \
         `_meta: {{\"{RUN_META_KEY}\": \"<run id>\"}}` with `tools/call`, or the run header \
         the server documents; nothing was done"
    )]
    Unscoped,
}

/// A request's run error is the request's fault: `invalid_params`, which
/// clients report to the user rather than to the model.
impl From<RequestRunError> for ErrorData {
    fn from(err: RequestRunError) -> ErrorData {
        ErrorData::invalid_params(err.to_string(), None)
    }
}

/// Who the caller is, as the application's authentication proved it: for a
/// server behind OAuth, the access token's subject.
///
/// rmcp does not authenticate requests; the application's HTTP middleware
/// does, and puts a `Principal` in the HTTP request's extensions (or an MCP
/// request's). Every call of one principal is then one run, so a stateless
/// server, which has no sessions, still scopes repeats per user rather than
/// server-wide. Name the subject so that it is unique across the issuers the
/// server trusts (`issuer` and `sub` together, say).
///
/// ```
/// use idempotent_tools::rmcp::Principal;
///
/// let mut request = http::Request::new(());
/// // After checking the bearer token:
/// request.extensions_mut().insert(Principal::new("https://auth.example.com#user-42")?);
/// # Ok::<(), idempotent_tools::rmcp::EmptyPrincipal>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Principal(Arc<str>);

/// A [`Principal`] was made from empty text, which names nobody.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a principal names who is calling and cannot be empty")]
pub struct EmptyPrincipal;

impl Principal {
    /// A principal from its subject. Fails on empty text, which would scope
    /// every anonymous caller together without saying so.
    pub fn new(subject: impl Into<String>) -> Result<Principal, EmptyPrincipal> {
        let subject: String = subject.into();
        if subject.is_empty() {
            return Err(EmptyPrincipal);
        }
        Ok(Principal(Arc::from(subject)))
    }

    /// The subject's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Principal({:?})", &*self.0)
    }
}

/// An rmcp server whose tools take `run: Run`: it says which
/// [`RunPolicy`] resolves their runs.
///
/// The default method accepts every source, so most servers write the
/// empty impl:
///
/// ```
/// use idempotent_tools::rmcp::{ResolvesRuns, RunPolicy, RunSource};
///
/// struct Shop;
/// impl ResolvesRuns for Shop {}
///
/// struct StrictShop;
/// impl ResolvesRuns for StrictShop {
///     fn run_policy(&self) -> RunPolicy {
///         RunPolicy::new().without(RunSource::Session).refuse_unscoped()
///     }
/// }
/// # let _ = (Shop, StrictShop);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say how its tools find their run",
    label = "`run: Run` needs the server to implement `ResolvesRuns`",
    note = "add `impl idempotent_tools::rmcp::ResolvesRuns for {Self} {{}}` for the default order \
            (`_meta`, an extension, the principal, the session, then server-wide)"
)]
pub trait ResolvesRuns {
    /// The policy for this server's requests. Called once per request, so
    /// it may depend on the server's state.
    fn run_policy(&self) -> RunPolicy {
        RunPolicy::new()
    }
}

/// The run of a request under `policy`: the first of the allowed
/// [`RunSource`]s the request carries, in their order, else what
/// [`Unscoped`] says.
///
/// A run is written with the source it came from, so that no value a client
/// sends can name another source's run: `_meta` run `run-7` is the run
/// `meta/run-7`, the same text in the run header is `header/run-7`, and
/// neither can be made equal to `principal/alice`, a session's run or
/// [`SERVER_WIDE_RUN`] (each value's `/` and `%` are percent-encoded). When
/// the request carries a [`Principal`], every run it names is nested under
/// it (`principal/alice/meta/run-7`), whether or not the policy allows
/// [`RunSource::Principal`] as a run of its own, and so is the server-wide
/// run (`principal/alice/server-wide`): two principals never share a run,
/// whatever they send and whatever the policy.
///
/// A source that is there but malformed (an empty `_meta` run, an empty run
/// header) is refused rather than skipped: its sender meant to scope the
/// call, and a wider scope would surprise it.
pub fn run_of(
    context: &RequestContext<RoleServer>,
    policy: &RunPolicy,
) -> Result<Run, RequestRunError> {
    let http = context
        .extensions
        .get::<http::request::Parts>()
        .map(|parts| &parts.extensions);
    let principal = find::<Principal>(&context.extensions, http);
    let within = |source: &'static str, value: &str| match &principal {
        Some(principal) => Run::derived(&[("principal", principal.as_str()), (source, value)]),
        None => Run::derived(&[(source, value)]),
    };
    for source in RunSource::ALL {
        if !policy.allows(source) {
            continue;
        }
        let run = match source {
            RunSource::Meta => meta_run(context)?.map(|run| within("meta", run.as_str())),
            RunSource::Extension => extension_run(&context.extensions, http)?
                .map(|(tag, run)| within(tag, run.as_str())),
            RunSource::Principal => principal
                .as_ref()
                .map(|principal| Run::derived(&[("principal", principal.as_str())])),
            RunSource::Session => session_run(context, within),
        };
        if let Some(run) = run {
            tracing::debug!(target: TARGET, run_source = source.name(), run = %run, "the request's run");
            return Ok(run);
        }
    }
    match (policy.unscoped(), &principal) {
        (Unscoped::Refuse, _) => Err(RequestRunError::Unscoped),
        (Unscoped::ServerWide, None) => {
            fell_to_server_wide();
            Ok(Run::constant(SERVER_WIDE_RUN))
        }
        // A server that keeps its principals out of the run order still
        // never lets one read another's results.
        (Unscoped::ServerWide, Some(principal)) => {
            fell_to_server_wide();
            Ok(Run::derived(&[("principal", principal.as_str())]).then(SERVER_WIDE_RUN))
        }
    }
}

/// Says once per process, at warn level, that a call fell to the
/// server-wide run: a repeat is then any call of the same key, by any
/// client, for the store's retention, which a server rarely means.
fn fell_to_server_wide() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    tracing::warn!(
        target: TARGET,
        run = SERVER_WIDE_RUN,
        "a tools/call request named no run and came with no session, so it fell to the \
         server-wide run, which every client of this server (and, on a durable store, every later \
         server process) shares: name the run in `_meta[\"{RUN_META_KEY}\"]`, or serve stdio \
         through `ConnectionRuns`; said once per process"
    );
}

fn meta_run(context: &RequestContext<RoleServer>) -> Result<Option<Run>, RequestRunError> {
    let Some(value) = context.meta.get(RUN_META_KEY) else {
        return Ok(None);
    };
    let run = value.as_str().and_then(|text| Run::new(text).ok());
    run.map(Some).ok_or(RequestRunError::BadMeta)
}

/// The application's own [`Run`] (tagged `extension`), else the run header's
/// (tagged `header`, as a client wrote it).
fn extension_run(
    mcp: &Extensions,
    http: Option<&http::Extensions>,
) -> Result<Option<(&'static str, Run)>, RequestRunError> {
    if let Some(run) = find::<Run>(mcp, http) {
        return Ok(Some(("extension", run)));
    }
    match find::<HeaderRun>(mcp, http) {
        Some(HeaderRun::Named(run)) => Ok(Some(("header", run))),
        Some(HeaderRun::Invalid(header)) => Err(RequestRunError::BadHeader(header)),
        None => Ok(None),
    }
}

/// A `T` in the MCP request's extensions, else in its HTTP request's.
fn find<T: Clone + Send + Sync + 'static>(
    mcp: &Extensions,
    http: Option<&http::Extensions>,
) -> Option<T> {
    mcp.get::<T>()
        .or_else(|| http.and_then(|http| http.get::<T>()))
        .cloned()
}

/// `run: Run` as a tool method's parameter, filled by [`run_of`] under the
/// server's [`ResolvesRuns::run_policy`]. The parameter is not part of the
/// tool's input schema: the model never sees or chooses it.
impl<S: ResolvesRuns> FromContextPart<ToolCallContext<'_, S>> for Run {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        let policy = context.service.run_policy();
        Ok(run_of(context.request_context(), &policy)?)
    }
}
