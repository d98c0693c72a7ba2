//! rmcp (the Rust MCP SDK, 3.11): the run of a request, outcomes as tool
//! results, and errors the client can read.
//!
//! rmcp runs each `tools/call` request on a task of its own, so a
//! [`Run::scope`] entered around the server never reaches a tool. A tool
//! method takes `run: Run` instead, and `<run>` in its key reads it. The run
//! is resolved from the request by [`run_of`], the first of these that the
//! server's [`RunPolicy`] allows and the request carries:
//!
//! 1. [`RunSource::Meta`]: `_meta["idempotent/run"]`, from clients that name
//!    their agent run ([`with_run`] for rmcp clients);
//! 2. [`RunSource::Extension`]: a [`Run`] the application put on the
//!    request, or on the HTTP request it came in ([`RunHeaderLayer`] reads
//!    one from the `Idempotent-Run` header);
//! 3. [`RunSource::Principal`]: the [`Principal`] the application's
//!    authentication put there, so that each user is a run;
//! 4. [`RunSource::Session`]: the session the server issued: over
//!    streamable HTTP one that [`SessionRuns`] saw rmcp's session manager
//!    issue, over stdio the connection: one served through
//!    [`ConnectionRuns`] (every protocol), else one that opened with
//!    `initialize` (protocol 2025-11-25 and older);
//! 5. otherwise, by default, the run [`SERVER_WIDE_RUN`], the same for
//!    every request ([`Unscoped::ServerWide`]), or a refusal
//!    ([`Unscoped::Refuse`]). The first call that falls to the server-wide
//!    run is logged at warn level, once per process.
//!
//! Each step names a wider circle of calls than the one before, and none is
//! ever one request's own: a stateless request (protocol 2026-07-28) with
//! nothing else to go by shares the server-wide run, so a repeat is still a
//! repeat. The server says which steps it allows with [`ResolvesRuns`].
//!
//! # Who can read a run
//!
//! A replay hands back the first call's result, so whoever can name a run
//! can read what was done in it. Each run is therefore written with its
//! source (`meta/run-7`, `header/run-7`, `principal/alice`,
//! `session/<id>`, `connection/<id>`), so that nothing a client sends names
//! another source's run or the server-wide one, and every run a request
//! names is nested under its [`Principal`] when it has one
//! (`principal/alice/meta/run-7`), and so is the server-wide run
//! (`principal/alice/server-wide`, for a policy without
//! [`RunSource::Principal`]): two principals never share a run. An
//! `Mcp-Session-Id` counts only where [`SessionRuns`] saw it issued.
//!
//! Without a principal, a run a client names (in `_meta` or the run header)
//! is a bearer token: any client that sends the same text joins that run
//! and reads its replays. On a server open to more than one party,
//! authenticate and set a [`Principal`], or refuse client-named runs with
//! [`RunPolicy::without`].
//!
//! An [`Outcome`](crate::Outcome) is a tool result, never an error: a replay
//! reaches the client as the first result, then the note, in
//! `CallToolResult::content`, with `is_error` false.

mod http;
mod outcome;
mod policy;
mod run;
mod session;

use ::rmcp::model::{CallToolRequestParams, RequestMetaObject};

pub use self::http::{RUN_HEADER, RunHeader, RunHeaderLayer};
pub use self::policy::{RunPolicy, RunSource, Unscoped};
pub use self::run::{EmptyPrincipal, Principal, RequestRunError, ResolvesRuns, run_of};
pub use self::session::{ConnectionRuns, SessionRuns};
use crate::run::Run;

/// The `_meta` key under which a client names the run of a `tools/call`
/// request: `{"_meta": {"idempotent/run": "run-7"}}`.
pub const RUN_META_KEY: &str = "idempotent/run";

/// The `_meta` key of a tool result that says what the guard did: `fresh`,
/// `replay` or `conflict`; the `idempotent-tools gateway` also answers
/// `unknown`, `in-progress`, `released` and `error` under it. For clients
/// and logs; the model reads the note.
pub const STATUS_META_KEY: &str = "idempotent/status";

/// The `_meta` key under which a guarded call's key reaches an MCP server
/// downstream of the `idempotent-tools gateway`: the key to hand the
/// provider, in its [provider form](crate::call::Key::provider_key).
pub const KEY_META_KEY: &str = "idempotent/key";

/// The run of every request that nothing else scopes, under
/// [`Unscoped::ServerWide`]. With it a key such as
/// `<run>:refund:<args.order_id>` comes down to its order: one refund per
/// order for the store's retention, whoever asks and however often.
pub const SERVER_WIDE_RUN: &str = "server-wide";

/// Names `run` in a `tools/call` request's `_meta`, for a client written
/// with rmcp: the server's `run: Run` parameter reads it.
///
/// ```
/// use idempotent_tools::{Run, rmcp::{RUN_META_KEY, with_run}};
/// use rmcp::model::CallToolRequestParams;
///
/// let params = with_run(CallToolRequestParams::new("refund_order"), &Run::new("run-7")?);
/// let meta = params.meta.as_ref().and_then(|meta| meta.get(RUN_META_KEY));
/// assert_eq!(meta, Some(&serde_json::json!("run-7")));
/// # Ok::<(), idempotent_tools::Error>(())
/// ```
pub fn with_run(mut params: CallToolRequestParams, run: &Run) -> CallToolRequestParams {
    params
        .meta
        .get_or_insert_with(RequestMetaObject::new)
        .insert(RUN_META_KEY.into(), run.as_str().into());
    params
}
