//! The two kinds of connection a store's steps go over: one server's
//! reconnecting connection manager, or a Cluster connection that routes each
//! command to the primary of its key's slot. The steps are written once,
//! against [`Connection`]; what differs (where a script is loaded, which
//! nodes a `SCAN` walks) is here.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// A connection to one server or to a Cluster; cheap to clone, and every
/// clone multiplexes over the same sockets.
#[derive(Clone)]
pub(super) enum Connection {
    /// One server (or a proxy in front of many).
    Server(ConnectionManager),
    /// A Redis Cluster: commands go to the primary of their key's slot,
    /// and redirections and failovers are followed.
    Cluster(ClusterConnection),
}

/// Where one `SCAN` walk runs: the one server, or one Cluster primary by
/// its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    /// The server a [`Connection::Server`] talks to.
    Server,
    /// A Cluster primary.
    Primary {
        /// Its host, as the Cluster names it.
        host: String,
        /// Its port.
        port: u16,
    },
}

impl Connection {
    /// Whether this is a Cluster connection.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// Runs `cmd` where the record at `key` lives: on the server, or on
    /// the primary of the key's slot (a command with no key of its own,
    /// such as `SCRIPT LOAD`, would otherwise go to every primary).
    pub(super) async fn query_at(&mut self, cmd: Cmd, key: &str) -> RedisResult<Value> {
        match self {
            Connection::Server(connection) => connection.req_packed_command(&cmd).await,
            Connection::Cluster(connection) => {
                let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
                connection
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await
            }
        }
    }

    /// The nodes that together hold every key: the server, or each
    /// Cluster primary.
    pub(super) async fn primaries(&mut self) -> RedisResult<Vec<Node>> {
        let connection = match self {
            Connection::Server(_) => return Ok(vec![Node::Server]),
            Connection::Cluster(connection) => connection,
        };
        // With no policy to merge the answers, the Cluster connection
        // answers with a map from each primary's address to its reply.
        let answers = connection
            .route_command(
                redis::cmd("PING"),
                RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
            )
            .await?;
        let Value::Map(answers) = answers else {
            return Err(unexpected("the primaries' addresses", &answers));
        };
        let mut nodes = Vec::with_capacity(answers.len());
        for (address, _) in answers {
            let address: String = redis::from_redis_value(address)?;
            let node = address
                .rsplit_once(':')
                .and_then(|(host, port)| {
                    Some(Node::Primary {
                        host: host.to_owned(),
                        port: port.parse().ok()?,
                    })
                })
                .ok_or_else(|| unexpected("a primary's address", &address))?;
            nodes.push(node);
        }
        nodes.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        Ok(nodes)
    }

    /// Runs `cmd` (a `SCAN`) on `node`.
    pub(super) async fn query_on(&mut self, cmd: Cmd, node: &Node) -> RedisResult<Value> {
        match (self, node) {
            (Connection::Cluster(connection), Node::Primary { host, port }) => {
                connection
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port: *port,
                        }),
                    )
                    .await
            }
            (connection, _) => connection.req_packed_command(&cmd).await,
        }
    }
}

/// A reply of a shape the store did not ask for, as a client error.
fn unexpected(what: &str, got: &dyn std::fmt::Debug) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "an unexpected reply",
        format!("{what}: {got:?}"),
    ))
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Server(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Server(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Server(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}
