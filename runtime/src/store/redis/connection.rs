//! The two kinds of connection a store's steps go over: one server's
//! reconnecting connection manager, or a Cluster connection that routes each
//! command to the primary of its key's slot. The steps are written once,
//! against [`Connection`]; what differs (where a script is loaded, which
//! nodes a `SCAN` walks) is here.
//!
//! A Cluster connection is renewed when a step finds it broken: after a
//! failover, redis-rs's Cluster connection can stop answering every slot
//! (each command times out) while a new one, from the same client, routes
//! at once. The steps then go on over the new connection.

use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClient;
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
    Cluster(Cluster),
}

/// A Cluster connection that can be renewed, shared by every clone: the
/// client that makes it, and the connection in use with its generation.
#[derive(Clone)]
pub(super) struct Cluster {
    shared: Arc<Shared>,
}

struct Shared {
    client: ClusterClient,
    current: Mutex<(u64, ClusterConnection)>,
}

impl Cluster {
    pub(super) fn new(client: ClusterClient, connection: ClusterConnection) -> Cluster {
        Cluster {
            shared: Arc::new(Shared {
                client,
                current: Mutex::new((0, connection)),
            }),
        }
    }

    /// The connection in use, and its generation.
    pub(super) fn current(&self) -> (u64, ClusterConnection) {
        let current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (current.0, current.1.clone())
    }

    /// Replaces the connection of generation `broken` with a new one, unless
    /// another step has already done so. A new connection that cannot be
    /// made leaves the old one; the step's next try comes back here.
    pub(super) async fn renew(&self, broken: u64) {
        if self.current().0 != broken {
            return;
        }
        let Ok(fresh) = self.shared.client.get_async_connection().await else {
            return;
        };
        let mut current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if current.0 == broken {
            *current = (broken + 1, fresh);
        }
    }
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

    /// The generation of the connection a step is about to use, to name it
    /// to [`Connection::renew`] if it turns out broken.
    pub(super) fn generation(&self) -> u64 {
        match self {
            Connection::Server(_) => 0,
            Connection::Cluster(cluster) => cluster.current().0,
        }
    }

    /// After a broken step: a Cluster connection of generation `broken` is
    /// replaced; one server's connection manager reconnects by itself.
    pub(super) async fn renew(&self, broken: u64) {
        if let Connection::Cluster(cluster) = self {
            cluster.renew(broken).await;
        }
    }

    /// Runs `cmd` where the record at `key` lives: on the server, or on
    /// the primary of the key's slot (a command with no key of its own,
    /// such as `SCRIPT LOAD`, would otherwise go to every primary).
    pub(super) async fn query_at(&mut self, cmd: Cmd, key: &str) -> RedisResult<Value> {
        match self {
            Connection::Server(connection) => connection.req_packed_command(&cmd).await,
            Connection::Cluster(cluster) => {
                let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
                cluster
                    .current()
                    .1
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
        let mut connection = match self {
            Connection::Server(_) => return Ok(vec![Node::Server]),
            Connection::Cluster(cluster) => cluster.current().1,
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
            (Connection::Cluster(cluster), Node::Primary { host, port }) => {
                cluster
                    .current()
                    .1
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
            Connection::Cluster(cluster) => {
                let mut connection = cluster.current().1;
                Box::pin(async move { connection.req_packed_command(cmd).await })
            }
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
            Connection::Cluster(cluster) => {
                let mut connection = cluster.current().1;
                Box::pin(async move {
                    connection
                        .req_packed_commands(pipeline, offset, count)
                        .await
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Server(connection) => connection.get_db(),
            Connection::Cluster(cluster) => cluster.current().1.get_db(),
        }
    }
}
