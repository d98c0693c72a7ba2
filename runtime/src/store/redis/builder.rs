//! Setting a Redis store up: the builder and what connecting checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use redis::IntoConnectionInfo;
use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClientBuilder;

use super::connection::{Cluster, Connection};
use super::error::redis_error;
use super::listener::{Listener, Nodes};
use super::scripts::{SCRIPTS, Script};
use super::{
    DEFAULT_COALESCE_BATCH, DEFAULT_COALESCE_IN_FLIGHT, DEFAULT_PREFIX, Inner, RedisStore,
};
use crate::store::durable::coalesce::{Coalescer, Limits};
use crate::store::durable::reconnect::DEFAULT_RECONNECT_WITHIN;
use crate::store::{StoreError, StoreResult};

/// How long connecting, and any one reply, may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The pause before the connection manager tries a broken connection
/// again (redis-rs waits 100 ms unless told).
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

/// A [`RedisStore`] being set up: [`RedisStore::builder`], options, then
/// [`RedisStoreBuilder::connect`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct RedisStoreBuilder {
    target: Target,
    prefix: String,
    replicas: Option<(u32, Duration)>,
    connections: usize,
    reconnect_within: Duration,
    coalesce: Option<Limits>,
}

/// What a builder connects to.
#[derive(Debug, Clone)]
enum Target {
    /// One server, by its URL.
    Server(String),
    /// A Cluster, by the URLs of some of its nodes.
    Cluster(Vec<String>),
}

impl RedisStoreBuilder {
    pub(super) fn new(url: String) -> RedisStoreBuilder {
        RedisStoreBuilder::with(Target::Server(url))
    }

    pub(super) fn cluster(nodes: Vec<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::with(Target::Cluster(nodes))
    }

    fn with(target: Target) -> RedisStoreBuilder {
        RedisStoreBuilder {
            target,
            prefix: DEFAULT_PREFIX.to_owned(),
            replicas: None,
            connections: 2,
            reconnect_within: DEFAULT_RECONNECT_WITHIN,
            coalesce: None,
        }
    }

    /// The prefix of every key and of the wake channel (default
    /// [`DEFAULT_PREFIX`]), so that several applications, or tests, share
    /// a server without seeing each other's records.
    pub fn prefix(mut self, prefix: impl Into<String>) -> RedisStoreBuilder {
        self.prefix = prefix.into();
        self
    }

    /// After each claim and each completion, waits (`WAIT`, in the same
    /// round trip) until `replicas` replicas have the write, or `timeout`
    /// passes.
    ///
    /// Redis replicates asynchronously: without this, a claim or record
    /// acknowledged by a primary that dies before its replicas copied it is
    /// lost when a replica is promoted, and a retry may act again. A write
    /// that fewer replicas acknowledged in time fails with
    /// [`StoreError::Unavailable`] (a claim is released first, so nothing
    /// runs; a completion is retried by the guard). `WAIT` narrows the
    /// window; it does not make Redis a consensus store.
    ///
    /// `WAIT` blocks the connection it is sent on until it returns, so give
    /// a store that uses it several [`connections`](Self::connections).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> RedisStoreBuilder {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// How many multiplexed connections the store uses, in turn (default
    /// 2). Each carries many concurrent steps; with two, the client writes
    /// and reads one while the server runs the other's scripts: 1.6× the
    /// fresh calls per second of one, with 16 callers (BENCHMARKS.md
    /// section 8). Give a store more under
    /// [`wait_for_replicas`](Self::wait_for_replicas).
    pub fn connections(mut self, connections: usize) -> RedisStoreBuilder {
        self.connections = connections.max(1);
        self
    }

    /// How long a step keeps trying when the connection breaks (a restart,
    /// a failover, a network blip) before it reports the store
    /// [unavailable](StoreError::Unavailable); default
    /// [`DEFAULT_RECONNECT_WITHIN`](crate::store::DEFAULT_RECONNECT_WITHIN). Every step is safe to repeat: a claim
    /// whose reply was lost finds the claim its own by its holder token,
    /// and a completion, release or renewal is fenced.
    pub fn reconnect_within(mut self, budget: Duration) -> RedisStoreBuilder {
        self.reconnect_within = budget;
        self
    }

    /// Whether claims and completions are coalesced (off by default; never
    /// on a Cluster, where one pipeline's keys would span nodes).
    ///
    /// Each multiplexed connection already pipelines the steps of
    /// concurrent callers on its socket, so coalescing saves no server
    /// work; what it saves is a `WAIT` per step under
    /// [`wait_for_replicas`](Self::wait_for_replicas), where one `WAIT`
    /// follows each pipeline. Without `WAIT` it costs a task and a channel
    /// per step: BENCHMARKS.md section 8 measures it slower.
    ///
    /// On, a claim or completion that finds no pipeline on the wire goes at
    /// once, alone: no added delay. Under a light load it also goes at once
    /// beside a few others (see
    /// [`coalesce_in_flight`](Self::coalesce_in_flight)). Otherwise it
    /// waits, and those waiting go together as one pipeline of their
    /// scripts (with one `WAIT` after them, if asked for) as soon as one
    /// comes back, up to [`coalesce_batch`](Self::coalesce_batch) of them.
    /// Each caller gets its own reply (its claim and fence, the
    /// record it replays, a conflict, a claim in flight, a lost lease), and
    /// a script that fails for one caller fails that caller only. Two steps
    /// on one key never share a pipeline. A caller dropped while it waits
    /// is left out; a claim made for a caller that has gone is released at
    /// once. Releases, renewals and forgetting are not coalesced.
    /// [`RedisStore::round_trips`] counts a pipeline as one.
    pub fn coalesce(mut self, on: bool) -> RedisStoreBuilder {
        self.coalesce = on.then_some(Limits {
            batch: DEFAULT_COALESCE_BATCH,
            in_flight: DEFAULT_COALESCE_IN_FLIGHT,
        });
        self
    }

    /// The most claims and completions in one coalesced pipeline (default
    /// [`DEFAULT_COALESCE_BATCH`]); turns coalescing on.
    pub fn coalesce_batch(mut self, steps: usize) -> RedisStoreBuilder {
        let in_flight = self
            .coalesce
            .map_or(DEFAULT_COALESCE_IN_FLIGHT, |c| c.in_flight);
        self.coalesce = Some(Limits {
            batch: steps.max(1),
            in_flight,
        });
        self
    }

    /// How many coalesced pipelines may be on the wire at once (default
    /// [`DEFAULT_COALESCE_IN_FLIGHT`]); beyond the first, one goes only
    /// while those on the wire carry fewer steps than this. Turns
    /// coalescing on.
    pub fn coalesce_in_flight(mut self, pipelines: usize) -> RedisStoreBuilder {
        let batch = self.coalesce.map_or(DEFAULT_COALESCE_BATCH, |c| c.batch);
        self.coalesce = Some(Limits {
            batch,
            in_flight: pipelines.max(1),
        });
        self
    }

    /// Connects, loads the scripts, reads the eviction policy (warning if
    /// it may evict records), and subscribes for wake-ups. Fails with
    /// [`StoreError::Unavailable`] if the server cannot be reached, and with
    /// [`StoreError::Backend`] for a URL it cannot read.
    pub async fn connect(self) -> StoreResult<RedisStore> {
        let (connections, nodes) = match &self.target {
            Target::Server(url) => self.connect_server(url).await?,
            Target::Cluster(urls) => self.connect_cluster(urls).await?,
        };
        let mut first = connections[0].clone();
        for script in SCRIPTS.all() {
            load(&mut first, script, None).await?;
        }
        let eviction_policy = eviction_policy(&mut first).await;
        if let Some(policy) = eviction_policy.as_deref() {
            warn_if_evicting(policy);
        }
        let channel = format!("{}wake", self.prefix);
        let listener = Listener::new(nodes, channel.clone());
        let batches = self
            .coalesce
            .filter(|_| !first.is_cluster())
            .map(|limits| Arc::new(Coalescer::new(limits)));
        let store = RedisStore {
            inner: Arc::new(Inner {
                connections,
                next: AtomicUsize::new(0),
                prefix: self.prefix,
                channel,
                replicas: self.replicas,
                reconnect_within: self.reconnect_within,
                listener,
                eviction_policy,
                round_trips: AtomicU64::new(0),
                published: AtomicU64::new(0),
                script_loads: AtomicU64::new(SCRIPTS.all().len() as u64),
                batches,
            }),
        };
        // Waiters before this is up are woken by timers, never missed.
        store.inner.listener.up().await;
        Ok(store)
    }

    /// Connection managers to one server, and how the listener reaches it.
    async fn connect_server(&self, url: &str) -> StoreResult<(Vec<Connection>, Nodes)> {
        let client = redis::Client::open(url).map_err(redis_error("connect"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            // One quick retry inside the manager: the steps pace their own
            // tries (`reconnect_within`), so a longer pause here would only
            // delay the first call after a restart.
            .set_number_of_retries(1)
            .set_min_delay(RECONNECT_PAUSE);
        let mut connections = Vec::with_capacity(self.connections);
        for _ in 0..self.connections {
            let manager = client
                .get_connection_manager_with_config(config.clone())
                .await
                .map_err(redis_error("connect"))?;
            connections.push(Connection::Server(manager));
        }
        Ok((connections, Nodes::Server(client)))
    }

    /// Cluster connections, and how the listener reaches a node.
    async fn connect_cluster(&self, urls: &[String]) -> StoreResult<(Vec<Connection>, Nodes)> {
        let seeds = urls
            .iter()
            .map(|url| url.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(redis_error("connect"))?;
        if seeds.is_empty() {
            return Err(StoreError::Backend(Box::new(NoNodes)));
        }
        let client = ClusterClientBuilder::new(seeds.clone())
            .connection_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .build()
            .map_err(redis_error("connect"))?;
        let mut connections = Vec::with_capacity(self.connections);
        for _ in 0..self.connections.max(1) {
            let connection = client
                .get_async_connection()
                .await
                .map_err(redis_error("connect"))?;
            connections.push(Cluster::new(client.clone(), connection));
        }
        let first = connections[0].clone();
        let connections = connections.into_iter().map(Connection::Cluster).collect();
        Ok((connections, Nodes::cluster(seeds, first)))
    }
}

/// A Cluster named by no node at all.
#[derive(Debug, thiserror::Error)]
#[error("a Redis Cluster store needs the URL of at least one of the Cluster's nodes")]
struct NoNodes;

/// Loads one script into the server's script cache: on a Cluster, on
/// the primary of `key`'s slot, or on every primary without a key.
pub(super) async fn load(
    connection: &mut Connection,
    script: &Script,
    key: Option<&str>,
) -> StoreResult<()> {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(script.source);
    let reply = match key {
        Some(key) => connection.query_at(cmd, key).await,
        None => cmd.query_async(connection).await,
    };
    let hash: String = reply
        .and_then(|reply| redis::from_redis_value(reply).map_err(Into::into))
        .map_err(redis_error("script load"))?;
    if hash != script.hash {
        return Err(StoreError::Corrupt(format!(
            "the server hashed the `{}` script as {hash}, not {}",
            script.name, script.hash
        )));
    }
    Ok(())
}

impl Inner {
    /// Loads a script the server forgot, where the record at `key` lives
    /// (on a Cluster, a replica promoted by a failover may never have
    /// loaded it).
    pub(super) async fn reload(
        &self,
        connection: &mut Connection,
        script: &Script,
        key: &str,
    ) -> StoreResult<()> {
        self.script_loads.fetch_add(1, Ordering::Relaxed);
        load(connection, script, Some(key)).await
    }
}

/// The server's `maxmemory-policy`, or `None` if it will not say.
async fn eviction_policy(connection: &mut Connection) -> Option<String> {
    let reply: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(connection)
        .await
        .ok()?;
    reply.into_iter().nth(1)
}

/// Every policy but `noeviction` may remove a record before its retention
/// when memory runs short (`volatile-*` ones too: every record has a time
/// to live), and a retry would then act again.
fn warn_if_evicting(policy: &str) {
    if policy != "noeviction" {
        tracing::warn!(
            policy,
            "the Redis server may evict keys under memory pressure (maxmemory-policy {policy}); \
             an evicted record lets a retry run its action again. Set `maxmemory-policy \
             noeviction`, or give the store a server of its own with that policy"
        );
    }
}
