//! One pub/sub connection per store that wakes the waiters of a key.
//!
//! Completions and releases publish the key's digest on the store's wake
//! channel, but only when a waiter marked the record (see `claim.lua`):
//! a completion nobody waits for costs its one round trip and nothing more.
//! Messages can be lost (the connection drops, the server fails over), so a
//! waiter also looks again when the holder's lease would run out, and at
//! least every [`RECHECK_EVERY`](super::RECHECK_EVERY); a listener that goes
//! down wakes every waiter at once. The waiters and their wake-ups are the
//! durable stores' [registry](crate::store::durable::waiters).
//!
//! On a Cluster, a classic `PUBLISH` reaches the subscribers of every node,
//! so the listener subscribes on any one node: each session takes the next
//! node in turn, replicas first (they serve no claims), then primaries,
//! then the nodes the store was given, among those the Cluster reports
//! healthy, and moves on at once past a node that does not answer.
//! A node that fails or leaves ends the session (every waiter wakes and
//! looks again), and the next session subscribes on another node.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::connection::Cluster;
use redis::{ConnectionAddr, ConnectionInfo};
use tokio::sync::watch;

use crate::store::durable::waiters::{self, Connect, Session};

/// How long the listener may take to connect and subscribe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the listener connects: a pub/sub connection to the store's server,
/// or to a node of its Cluster, subscribed to its wake channel.
pub(super) struct Subscribe {
    nodes: Arc<Nodes>,
    channel: String,
}

/// Where the listener may subscribe.
pub(super) enum Nodes {
    /// The store's one server.
    Server(redis::Client),
    /// Any node of the store's Cluster.
    Cluster {
        /// The nodes the store was given, and the settings (user,
        /// password, TLS) for every node.
        seeds: Vec<ConnectionInfo>,
        /// For asking the Cluster which nodes it has now.
        cluster: Cluster,
        /// Which node the next session tries first.
        turn: AtomicUsize,
    },
}

impl Nodes {
    pub(super) fn cluster(seeds: Vec<ConnectionInfo>, cluster: Cluster) -> Nodes {
        Nodes::Cluster {
            seeds,
            cluster,
            turn: AtomicUsize::new(0),
        }
    }

    /// The nodes to try, in the order to try them.
    async fn candidates(&self) -> Vec<redis::Client> {
        let (seeds, cluster, turn) = match self {
            Nodes::Server(client) => return vec![client.clone()],
            Nodes::Cluster {
                seeds,
                cluster,
                turn,
            } => (seeds, cluster, turn),
        };
        let Some(settings) = seeds.first() else {
            return Vec::new();
        };
        let (generation, mut connection) = cluster.current();
        let listed = tokio::time::timeout(
            CONNECT_TIMEOUT,
            connection.route_command(
                redis::cmd("CLUSTER").arg("NODES").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            ),
        )
        .await;
        let listed = match listed {
            Ok(Ok(reply)) => redis::from_redis_value::<String>(reply).unwrap_or_default(),
            // The connection is renewed for the next session; this one
            // tries the nodes it was given.
            _ => {
                cluster.renew(generation).await;
                String::new()
            }
        };
        let turn = turn.fetch_add(1, Ordering::Relaxed);
        let (mut replicas, mut primaries): (Vec<_>, Vec<_>) = healthy_nodes(&listed)
            .into_iter()
            .partition(|node| node.replica);
        for nodes in [&mut replicas, &mut primaries] {
            if !nodes.is_empty() {
                let len = nodes.len();
                nodes.rotate_left(turn % len);
            }
        }
        let mut seen = HashSet::new();
        replicas
            .into_iter()
            .chain(primaries)
            .filter_map(|node| at(settings, node.host, node.port))
            .chain(seeds.iter().cloned())
            .filter(|info| seen.insert(info.addr().to_string()))
            .filter_map(|info| redis::Client::open(info).ok())
            .collect()
    }
}

/// A node a `CLUSTER NODES` reply lists.
#[derive(Debug, PartialEq, Eq)]
struct Listed<'a> {
    host: &'a str,
    port: u16,
    replica: bool,
}

/// Every node a `CLUSTER NODES` reply lists as neither failing nor
/// unreachable.
fn healthy_nodes(listed: &str) -> Vec<Listed<'_>> {
    listed
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _id = fields.next()?;
            // `ip:port@cport[,hostname]`
            let address = fields.next()?.split(['@', ',']).next()?;
            let flags = fields.next()?;
            let unhealthy = flags
                .split(',')
                .any(|flag| matches!(flag, "fail" | "fail?" | "noaddr" | "handshake"));
            let replica = flags
                .split(',')
                .any(|flag| matches!(flag, "slave" | "replica"));
            let (host, port) = address.rsplit_once(':')?;
            (!unhealthy && !host.is_empty()).then_some(Listed {
                host,
                port: port.parse().ok()?,
                replica,
            })
        })
        .collect()
}

/// `settings` with its address moved to `host:port`; `None` for a Unix
/// socket, which has no host to move.
fn at(settings: &ConnectionInfo, host: &str, port: u16) -> Option<ConnectionInfo> {
    let mut addr = settings.addr().clone();
    match &mut addr {
        ConnectionAddr::Tcp(h, p) => {
            *h = host.to_owned();
            *p = port;
        }
        ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => {
            *h = host.to_owned();
            *p = port;
        }
        _ => return None,
    }
    Some(settings.clone().set_addr(addr))
}

impl Connect for Subscribe {
    fn session(
        &self,
        listener: Weak<Listener>,
        stop: watch::Receiver<()>,
    ) -> impl Future<Output = ()> + Send + 'static {
        listen(
            Session::new(listener, stop),
            self.nodes.clone(),
            self.channel.clone(),
        )
    }
}

/// The subscribed connection's state and the per-key channels it wakes.
pub(super) type Listener = waiters::Listener<Subscribe>;

/// A subscription to one key's wake-ups; unsubscribes when dropped.
pub(super) type KeyWatch = waiters::KeyWatch<Subscribe>;

impl Listener {
    pub(super) fn new(nodes: Nodes, channel: String) -> Arc<Listener> {
        Listener::with(Subscribe {
            nodes: Arc::new(nodes),
            channel,
        })
    }
}

impl KeyWatch {
    /// Until the key's wake-up or `nap`, whichever comes first.
    pub(super) async fn until(mut self, nap: Duration) {
        self.woken_or(nap).await;
    }
}

/// One session: connect, `SUBSCRIBE` (on the first node that answers),
/// then deliver wake-ups until the connection or the store goes away.
async fn listen(mut session: Session<Subscribe>, nodes: Arc<Nodes>, channel: String) {
    let mut subscribed = None;
    for client in nodes.candidates().await {
        let tried = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        if let Ok(Ok(pubsub)) = tried {
            subscribed = Some(pubsub);
            break;
        }
    }
    let Some(pubsub) = subscribed else {
        return;
    };
    if !session.up() {
        return;
    }
    let mut messages = pubsub.into_on_message();
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) if session.wake(message.get_payload_bytes()) => {}
                _ => return,
            },
            () = session.stopped() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_and_unreachable_nodes_are_left_out() {
        let listed = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,node-b.internal master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7002@17002 master,fail - 0 0 3 connected 10923-16383
d4 127.0.0.1:7003@17003 slave,fail? a1 0 0 1 connected
e5 :0@0 slave,noaddr b2 0 0 2 disconnected
f6 ::1:7005@17005 slave c3 0 0 3 connected
";
        let node = |host, port, replica| Listed {
            host,
            port,
            replica,
        };
        assert_eq!(
            healthy_nodes(listed),
            [
                node("127.0.0.1", 7000, false),
                node("127.0.0.1", 7001, false),
                node("::1", 7005, true)
            ]
        );
        assert!(healthy_nodes("").is_empty());
        assert!(healthy_nodes("garbage\n\n").is_empty());
    }

    #[test]
    fn a_node_is_reached_with_the_settings_of_the_first() {
        let settings =
            redis::IntoConnectionInfo::into_connection_info("redis://ops:secret@10.0.0.1:7000/")
                .expect("a URL");
        let moved = at(&settings, "10.0.0.9", 7009).expect("a TCP node");
        assert_eq!(moved.addr().to_string(), "10.0.0.9:7009");
        assert_eq!(moved.redis_settings().password(), Some("secret"));
        assert_eq!(moved.redis_settings().username(), Some("ops"));
    }
}
