//! The MCP session of a request, as the server issued it: over streamable
//! HTTP a session that rmcp's session manager issued, seen through
//! [`SessionRuns`]; over a stream transport, the connection, named by
//! [`ConnectionRuns`] when the server serves it, else by its `initialize`
//! handshake.

use std::future::Future;
use std::sync::{Arc, LazyLock, Weak};

use dashmap::DashMap;

use ::rmcp::RoleServer;
use ::rmcp::model::{
    ClientJsonRpcMessage, GetExtensions, InitializeRequestParams, ServerJsonRpcMessage,
};
use ::rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use ::rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use ::rmcp::transport::{IntoTransport, Transport};
use futures_util::Stream;

use crate::run::Run;

/// A session manager that marks each request it routes into a session, so
/// that `run: Run` can take the session as the request's run
/// ([`RunSource::Session`](super::RunSource::Session)).
///
/// rmcp tells a tool nothing about whether the `Mcp-Session-Id` of a request
/// was issued: a server in stateless mode passes any id a client invents
/// through to the tool. A request's session counts only if it reached the
/// tool through this wrapper, which sees the session manager route it; an id
/// that no session manager issued never does, so a client that sends a new
/// id with each request cannot get a run per request. Without the wrapper
/// `Mcp-Session-Id` is ignored, and the request falls to the next source.
///
/// ```
/// use idempotent_tools::rmcp::SessionRuns;
/// use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
///
/// let sessions = SessionRuns::new(LocalSessionManager::default());
/// // StreamableHttpService::new(make_server, sessions.into(), config)
/// # let _: std::sync::Arc<SessionRuns<LocalSessionManager>> = sessions.into();
/// ```
#[derive(Debug, Default)]
pub struct SessionRuns<M> {
    inner: M,
}

impl<M> SessionRuns<M> {
    /// Wraps `inner`, which issues and keeps the sessions as before.
    pub fn new(inner: M) -> SessionRuns<M> {
        SessionRuns { inner }
    }

    /// The wrapped session manager.
    pub fn inner(&self) -> &M {
        &self.inner
    }
}

/// Left in a request's extensions by [`SessionRuns`]: the session that
/// rmcp's session manager routed it into. Never on the wire, so a client
/// cannot send one.
#[derive(Clone, Debug)]
struct IssuedSession(SessionId);

fn mark(id: &SessionId, mut message: ClientJsonRpcMessage) -> ClientJsonRpcMessage {
    if let ClientJsonRpcMessage::Request(request) = &mut message {
        request
            .request
            .extensions_mut()
            .insert(IssuedSession(id.clone()));
    }
    message
}

impl<M: SessionManager> SessionManager for SessionRuns<M> {
    type Error = M::Error;
    type Transport = M::Transport;

    fn create_session(
        &self,
    ) -> impl Future<Output = Result<(SessionId, Self::Transport), Self::Error>> + Send {
        self.inner.create_session()
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.inner.initialize_session(id, message)
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.has_session(id)
    }

    fn close_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close_session(id)
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_stream(id, mark(id, message))
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        // Notifications and replies to the server's own requests: nothing
        // here reaches a tool, so nothing is marked.
        self.inner.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.resume(id, last_event_id)
    }

    fn restore_session(
        &self,
        id: SessionId,
    ) -> impl Future<Output = Result<RestoreOutcome<Self::Transport>, Self::Error>> + Send {
        self.inner.restore_session(id)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

/// A stream transport (stdio, a socket, a pipe) whose connection is the run
/// of every call it carries ([`RunSource::Session`](super::RunSource::Session)),
/// whatever protocol the client speaks.
///
/// A client on protocol 2026-07-28 opens no session: over stdio nothing in
/// its requests tells one connection from another, and without this wrapper
/// a call that names no run in `_meta` falls to the server-wide run, which
/// a later process on the same durable store shares. A stdio server process
/// serves one client, so its connection is the natural run: wrap the
/// transport as it is served, and an id is minted for the connection then,
/// once, at random, and every request that comes in on it carries it. Two
/// connections, in this process or another, never share one.
///
/// ```no_run
/// use idempotent_tools::rmcp::ConnectionRuns;
/// use rmcp::{RoleServer, ServerHandler, ServiceExt, transport::Transport};
///
/// // `transport` is `rmcp::transport::stdio()` in a stdio server.
/// async fn serve<E: std::error::Error + Send + Sync + 'static>(
///     shop: impl ServerHandler,
///     transport: impl Transport<RoleServer, Error = E> + 'static,
/// ) -> Result<(), Box<dyn std::error::Error>> {
///     shop.serve(ConnectionRuns::new(transport)).await?.waiting().await?;
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct ConnectionRuns<T> {
    inner: T,
    id: Arc<str>,
}

impl ConnectionRuns<()> {
    /// Wraps `transport` (anything rmcp serves: `rmcp::transport::stdio()`,
    /// an `AsyncRead + AsyncWrite` pair, a transport), minting its
    /// connection's id.
    #[allow(clippy::new_ret_no_self)]
    pub fn new<I, E, A>(transport: I) -> ConnectionRuns<impl Transport<RoleServer, Error = E>>
    where
        I: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        ConnectionRuns {
            inner: transport.into_transport(),
            id: Arc::from(uuid::Uuid::new_v4().to_string()),
        }
    }
}

/// Left in a request's extensions by [`ConnectionRuns`]: the id of the
/// connection it came in on. Never on the wire, so a client cannot send one.
#[derive(Clone, Debug)]
struct ServedConnection(Arc<str>);

impl<T: Transport<RoleServer>> Transport<RoleServer> for ConnectionRuns<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        let id = Arc::clone(&self.id);
        let next = self.inner.receive();
        async move {
            let mut message = next.await?;
            if let ClientJsonRpcMessage::Request(request) = &mut message {
                request
                    .request
                    .extensions_mut()
                    .insert(ServedConnection(id));
            }
            Some(message)
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The run of the request's session, if the server issued it, made by
/// `within` from the source's tag and the session's id.
///
/// Over HTTP only a session that [`SessionRuns`] saw issued counts: a
/// stateless request (protocol 2026-07-28, or a server without sessions) is
/// served by a service made for it alone, and its `Mcp-Session-Id`, if any,
/// is the client's invention. Elsewhere the connection counts: the one
/// [`ConnectionRuns`] named, else one a client opened with `initialize`
/// (rmcp keeps that handshake for the connection's life).
pub(super) fn session_run(
    context: &RequestContext<RoleServer>,
    within: impl Fn(&'static str, &str) -> Run,
) -> Option<Run> {
    if context.extensions.get::<http::request::Parts>().is_some() {
        let IssuedSession(id) = context.extensions.get::<IssuedSession>()?;
        return Some(within("session", id));
    }
    if let Some(ServedConnection(id)) = context.extensions.get::<ServedConnection>() {
        return Some(within("connection", id));
    }
    let handshake = context.peer.peer_info()?;
    Some(within("connection", &connection_id(&handshake)))
}

/// Ids minted for live connections, by the address of the connection's
/// handshake.
///
/// Each entry holds a [`Weak`] to the handshake, which keeps its allocation,
/// and so its address, from being reused while the entry lives: an address
/// found here is always the same connection's.
type Connections = DashMap<usize, (Weak<InitializeRequestParams>, Arc<str>)>;

static CONNECTIONS: LazyLock<Connections> = LazyLock::new(Connections::default);

/// The id of the connection whose handshake is `handshake`: minted at
/// random on its first call, so that two connections, in this process or
/// another sharing the store, never share one. A connection's later calls
/// read it from one shard, under no lock of the whole map.
fn connection_id(handshake: &Arc<InitializeRequestParams>) -> Arc<str> {
    let address = Arc::as_ptr(handshake) as usize;
    if let Some(known) = CONNECTIONS.get(&address) {
        return known.1.clone();
    }
    // A new connection: forget those that have closed, then mint its id
    // once, even if its first calls race here.
    CONNECTIONS.retain(|_, (handshake, _)| handshake.strong_count() > 0);
    let entry = CONNECTIONS.entry(address).or_insert_with(|| {
        let id = uuid::Uuid::new_v4().to_string();
        (Arc::downgrade(handshake), Arc::from(id))
    });
    entry.1.clone()
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
        assert_eq!(connection_id(&first), connection_id(&first));
        assert_ne!(connection_id(&first), connection_id(&second));
    }

    #[test]
    fn a_connection_opened_after_one_closed_never_inherits_its_run() {
        let closed = handshake();
        let closed_run = connection_id(&closed);
        drop(closed);
        let opened = handshake();
        assert_ne!(connection_id(&opened), closed_run);
    }
}
