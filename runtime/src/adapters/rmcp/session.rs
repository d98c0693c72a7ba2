//! The MCP session of a request, as a run: the `Mcp-Session-Id` of a
//! streamable HTTP request, or the connection a stream transport serves.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use ::rmcp::RoleServer;
use ::rmcp::model::InitializeRequestParams;
use ::rmcp::service::RequestContext;

use crate::run::Run;

/// The header in which a streamable HTTP client names its session.
const SESSION_HEADER: &str = "mcp-session-id";

/// The session of a request, if it has one.
///
/// Over HTTP only the `Mcp-Session-Id` header counts: a stateless request
/// (protocol 2026-07-28, or a server without sessions) is served by a
/// service made for it alone, so nothing else about it outlives the request.
/// Elsewhere the connection counts, once a client opened it with
/// `initialize`: rmcp keeps that handshake for the connection's life.
pub(super) fn session_run(context: &RequestContext<RoleServer>) -> Option<Run> {
    if let Some(parts) = context.extensions.get::<http::request::Parts>() {
        let id = parts.headers.get(SESSION_HEADER)?.to_str().ok()?;
        return (!id.is_empty()).then(|| Run::prefixed("mcp-session", id));
    }
    let handshake = context.peer.peer_info()?;
    Some(connection_run(&handshake))
}

/// Runs minted for live connections, by the address of the connection's
/// handshake.
///
/// Each entry holds a [`Weak`] to the handshake, which keeps its allocation,
/// and so its address, from being reused while the entry lives: an address
/// found here is always the same connection's.
type Connections = HashMap<usize, (Weak<InitializeRequestParams>, Run)>;

static CONNECTIONS: LazyLock<Mutex<Connections>> = LazyLock::new(Mutex::default);

/// The run of the connection whose handshake is `handshake`: minted at
/// random on its first call, so that two connections, in this process or
/// another sharing the store, never share one.
fn connection_run(handshake: &Arc<InitializeRequestParams>) -> Run {
    let address = Arc::as_ptr(handshake) as usize;
    // No code panics while holding the lock; a poisoned map is still sound.
    let mut connections = CONNECTIONS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, run)) = connections.get(&address) {
        return run.clone();
    }
    // Forget connections that have closed before adding one.
    connections.retain(|_, (handshake, _)| handshake.strong_count() > 0);
    let run = Run::prefixed("connection", &uuid::Uuid::new_v4().to_string());
    connections.insert(address, (Arc::downgrade(handshake), run.clone()));
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake() -> Arc<InitializeRequestParams> {
        Arc::new(InitializeRequestParams::default())
    }

    #[test]
    fn one_connection_keeps_its_run_and_another_gets_its_own() {
        let first = handshake();
        let second = handshake();
        assert_eq!(connection_run(&first), connection_run(&first));
        assert_ne!(connection_run(&first), connection_run(&second));
    }

    #[test]
    fn a_connection_opened_after_one_closed_never_inherits_its_run() {
        let closed = handshake();
        let closed_run = connection_run(&closed);
        drop(closed);
        let opened = handshake();
        assert_ne!(connection_run(&opened), closed_run);
    }
}
