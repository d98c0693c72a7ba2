//! A holder cut off from a Redis Cluster mid-action ([`crate::partition`]).
//!
//! Each node gets a black hole on another loopback address with the node's
//! own port (127.0.0.2), and the nodes answer `CLUSTER SLOTS` with no
//! address (`cluster-preferred-endpoint-type unknown-endpoint`), which tells
//! a client to reach each node at the address it reached the cluster by.
//! So the holder's store, given the black holes' addresses, sends every
//! step through them, and the other caller's store, given the nodes', sends
//! its steps to the nodes. (The holder's wake-up listener finds its node in
//! `CLUSTER NODES`, which still names the nodes' own addresses; the holder
//! never waits.)

use std::net::SocketAddr;
use std::sync::Arc;

use idempotent_tools::RedisStore;
use idempotent_tools::call::Takeover;
use idempotent_tools::store::redis::redis;
use idempotent_tools_testing::conformance::kit;

use crate::partition::{BlackHole, a_holder_cut_off_mid_action};
use crate::{answers, lock_disrupted, node, port_of};

/// Where the holder reaches the node on a port.
const CUT_OFF: [u8; 4] = [127, 0, 0, 2];

/// The nodes on `ports` answering `CLUSTER SLOTS` without addresses;
/// dropped, with their own again.
struct Unaddressed(Vec<u16>);

impl Unaddressed {
    async fn set(ports: Vec<u16>) -> Unaddressed {
        for &port in &ports {
            endpoint_type(port, "unknown-endpoint").await;
        }
        Unaddressed(ports)
    }
}

async fn endpoint_type(port: u16, endpoint: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-preferred-endpoint-type")
        .arg(endpoint)
        .query_async(&mut node(port).await)
        .await
        .expect("CONFIG SET cluster-preferred-endpoint-type");
}

impl Drop for Unaddressed {
    fn drop(&mut self) {
        let ports = std::mem::take(&mut self.0);
        // Dropped inside the test's runtime: restore from a thread of its own.
        let restored = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(async move {
                    for port in ports {
                        endpoint_type(port, "ip").await;
                    }
                });
        });
        let _ = restored.join();
    }
}

async fn cut_off_mid_action(takeover: Takeover) {
    let cluster = lock_disrupted().await;
    let urls = cluster.urls();
    let mut live = Vec::new();
    for url in &urls {
        if answers(port_of(url)).await {
            live.push(port_of(url));
        }
    }
    let _unaddressed = Unaddressed::set(live.clone()).await;
    let mut holes = Vec::new();
    for &port in &live {
        let listen = SocketAddr::from((CUT_OFF, port));
        let upstream = SocketAddr::from(([127, 0, 0, 1], port));
        holes.push(BlackHole::start(listen, upstream).await);
    }
    let prefix = format!("idempotent-partition:{}:", kit::unique_id());
    let holder = RedisStore::builder_cluster(
        holes
            .iter()
            .map(|hole| format!("redis://{}", hole.addr()))
            .collect::<Vec<_>>(),
    )
    .prefix(prefix.as_str())
    .connect()
    .await
    .expect("a store through the black holes");
    let other = RedisStore::builder_cluster(urls)
        .prefix(prefix.as_str())
        .connect()
        .await
        .expect("a store on the cluster");
    a_holder_cut_off_mid_action(
        "Redis Cluster",
        Arc::new(holder),
        Arc::new(other),
        &holes,
        takeover,
    )
    .await;
}

/// The other caller takes over and acts again under the same provider key:
/// one refund; the holder's completion is refused by the fence.
pub async fn a_holder_cut_off_mid_action_loses_its_claim_and_the_provider_refunds_once() {
    cut_off_mid_action(Takeover::Rerun).await;
}

/// Under `Takeover::ReportUnknown` the other caller reports the outcome
/// unknown and does not act.
pub async fn a_holder_cut_off_mid_action_leaves_the_outcome_unknown_under_report_unknown() {
    cut_off_mid_action(Takeover::ReportUnknown).await;
}

/// Under `Takeover::Verify`, with a provider that takes no key, the other
/// caller asks the provider, finds the holder's refund and replays it.
pub async fn a_holder_cut_off_mid_action_is_verified_where_the_provider_takes_no_key() {
    cut_off_mid_action(Takeover::Verify).await;
}
