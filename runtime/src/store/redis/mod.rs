//! The Redis store: durable claims on a Redis (or Valkey) server shared by
//! processes on several hosts.
//!
//! # The client
//!
//! Built on [`redis`] (redis-rs) with tokio and its
//! `ConnectionManager`: a multiplexed
//! connection that every task pipelines its commands over and that
//! reconnects by itself (two, used in turn, by default). Every step here is
//! one command (a script), so a
//! multiplexed connection is what a pool would only approximate, and
//! redis-rs also gives the async pub/sub connection the waiters need. It is
//! the most used Redis client in Rust and builds small with its default
//! features off; `fred` would do the job too, with its own pool and
//! reconnection policies, at the price of a much larger surface that this
//! store would not use.
//!
//! # Layout
//!
//! One hash per key, at `<prefix>{<SHA-256 of the key, hex>}`. The braces
//! are a Cluster hash tag: a claim touches one key, so every step lands in
//! one slot. Completions and releases that a waiter asked for publish the
//! digest on `<prefix>wake`. The store connects to one server (a primary,
//! or a proxy in front of a Cluster) or, with
//! [`RedisStore::builder_cluster`], to a Redis Cluster: each step is one
//! script on one key, so it runs on the primary of that key's slot, and
//! the Cluster connection follows redirections. Wake-ups use classic
//! `PUBLISH`, which reaches every node, so the listener subscribes on any
//! one node (replicas first) and moves to another when that node goes.
//!
//! # Leases, fences, retention
//!
//! Scripts read the server's clock (`TIME`), never the caller's. A claim's
//! fence starts at 1 and each takeover bumps it, as in the SQLite and
//! Postgres stores; once the record is gone (released, forgotten, expired)
//! the next claim starts again at 1. What a completion or release checks is
//! the pair of the random 128-bit owner token and the fence, so a holder
//! from an earlier life of the key never matches.
//!
//! Records are kept by key expiry: a held claim expires its retention
//! after its lease (`PEXPIREAT`), a completed record its retention after
//! finishing (`PEXPIRE`, from the server's now). No purge job is needed, and
//! [`Records::purge_expired`] removes nothing and
//! returns 0.

mod batch;
mod builder;
mod call;
mod connection;
mod error;
mod inspect;
mod listener;
mod scripts;
mod steps;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use self::batch::{Answered, ScriptAsk};
use self::connection::Connection;
use self::listener::Listener;
use super::records::Resolution;
use super::{
    Claim, ClaimAnswer, ClaimRequest, Forget, Record, RecordCount, RecordPage, RecordQuery,
    Records, Store, StoreFuture, StoreResult,
};
use crate::key::Key;
use crate::store::durable::coalesce::Coalescer;
use crate::store::record::Completion;

pub use builder::RedisStoreBuilder;
/// The redis-rs crate this store is built on.
pub use redis;

/// The prefix of every key and channel unless
/// [`RedisStoreBuilder::prefix`] names another.
pub const DEFAULT_PREFIX: &str = "idempotent:";

/// The most a waiter sleeps before it looks at the claim again even though
/// no wake-up came: a bound on how long a lost message can delay it.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// The most claims and completions one coalesced pipeline carries, unless
/// [`RedisStoreBuilder::coalesce_batch`] says otherwise.
pub const DEFAULT_COALESCE_BATCH: usize = 64;

/// How many coalesced pipelines may be on the wire at once, unless
/// [`RedisStoreBuilder::coalesce_in_flight`] says otherwise.
pub const DEFAULT_COALESCE_IN_FLIGHT: usize = 2;

/// Claims and records in Redis, for processes on several hosts.
///
/// - **Set-up.** [`RedisStore::connect`] with a URL, or
///   [`RedisStore::builder`] for a prefix, replicated writes and more
///   connections. Nothing to migrate: scripts are loaded on connect.
/// - **One round trip per step.** Claim, completion, release, renewal and
///   forgetting are each one Lua script, run atomically by the server and
///   called by its hash. A replay, a conflict, and a claim found in flight
///   are answered by the claim script itself.
/// - **Leases and fences** by the server's clock; a dead holder's lease
///   runs out, the next caller takes over with a higher fence, and the dead
///   holder's completion changes nothing.
/// - **Waiting.** One pub/sub connection per store. A waiter subscribes
///   before its claim; the claim script marks the record when it finds the
///   claim in flight, and only a marked record's completion or release
///   publishes. A waiter also looks again when the lease would run out and
///   at least every [`RECHECK_EVERY`].
/// - **Restarts and failovers.** A step whose connection breaks tries
///   again, pacing itself, for up to
///   [`reconnect_within`](RedisStoreBuilder::reconnect_within): a claim whose
///   reply was lost finds the claim its own by its holder token, and the
///   other steps are fenced, so trying again never acts twice. What the
///   server keeps across a restart is its own configuration's matter: an
///   append-only file with `appendfsync always` keeps every acknowledged
///   record.
/// - **Retention** by key expiry. A `maxmemory-policy` other than
///   `noeviction` may evict a record before its time, and a retry would then
///   act again: the store warns on connect (through `tracing`) when the
///   server says so.
///
/// ```no_run
/// use std::sync::Arc;
/// use idempotent_tools::RedisStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::store::StoreError> {
/// let store = RedisStore::builder("redis://cache.internal:6379/2")
///     .prefix("shop:idempotent:")
///     .connect()
///     .await?;
/// idempotent_tools::set_default_store(Arc::new(store));
/// # Ok(()) }
/// ```
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connections: Vec<Connection>,
    next: AtomicUsize,
    prefix: String,
    channel: String,
    replicas: Option<(u32, Duration)>,
    reconnect_within: Duration,
    listener: Arc<Listener>,
    eviction_policy: Option<String>,
    round_trips: AtomicU64,
    published: AtomicU64,
    script_loads: AtomicU64,
    /// Claims and completions waiting for a round trip, if coalesced.
    batches: Option<Arc<Coalescer<ScriptAsk, Answered>>>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .field(
                "cluster",
                &self
                    .inner
                    .connections
                    .first()
                    .is_some_and(Connection::is_cluster),
            )
            .field("connections", &self.inner.connections.len())
            .field("replicas", &self.inner.replicas)
            .field("listening", &self.inner.listener.is_up())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the server at `url` (such as `redis://127.0.0.1:6379/0`,
    /// or `rediss://` for TLS where redis-rs is built with it) with the
    /// default settings. Fails with
    /// [`StoreError::Unavailable`](crate::store::StoreError::Unavailable) if the
    /// server cannot be reached.
    pub async fn connect(url: &str) -> StoreResult<RedisStore> {
        RedisStore::builder(url).connect().await
    }

    /// A builder for a store at `url`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url.into())
    }

    /// Connects to the Redis Cluster that `nodes` (URLs such as
    /// `redis://10.0.0.1:6379`, one or more of the Cluster's nodes) belong
    /// to, with the default settings. The Cluster's other nodes are found
    /// from these; user, password and TLS are taken from the URLs.
    pub async fn connect_cluster<I, U>(nodes: I) -> StoreResult<RedisStore>
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        RedisStore::builder_cluster(nodes).connect().await
    }

    /// A builder for a store on the Redis Cluster that `nodes` belong to;
    /// see [`connect_cluster`](RedisStore::connect_cluster).
    pub fn builder_cluster<I, U>(nodes: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        RedisStoreBuilder::cluster(nodes.into_iter().map(Into::into).collect())
    }

    /// The prefix of this store's keys and channel.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The Redis key that holds `key`'s record:
    /// `<prefix>{<SHA-256 of the key, hex>}`.
    pub fn record_key(&self, key: &Key) -> String {
        self.inner.record_key(&key.digest())
    }

    /// The channel completions and releases publish on when a waiter asked.
    pub fn wake_channel(&self) -> &str {
        &self.inner.channel
    }

    /// The server's `maxmemory-policy` as read on connect, or `None` if the
    /// server refused `CONFIG GET` (managed services often do).
    pub fn eviction_policy(&self) -> Option<&str> {
        self.inner.eviction_policy.as_deref()
    }

    /// Waits until the store's pub/sub connection is subscribed, connecting
    /// it if need be: for a readiness check. `false` if it cannot connect;
    /// waiters then look again on a timer.
    pub async fn listening(&self) -> bool {
        self.inner.listener.up().await
    }

    /// How many round trips the store's steps have made: one per claim,
    /// completion, release, renewal and forget (with its `WAIT`, if asked
    /// for), one per coalesced pipeline of claims and completions, and one
    /// more after a `NOSCRIPT`. For measuring, and for tests.
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    /// How many claims and completions wait for a pipeline to go out (see
    /// [`RedisStoreBuilder::coalesce`]): zero unless every pipeline slot is
    /// on the wire. For measuring, and for tests that hold a pipeline.
    pub fn waiting(&self) -> usize {
        self.inner.batches.as_ref().map_or(0, |b| b.waiting())
    }

    /// How many completions and releases have published a wake-up: only
    /// those a waiter marked.
    pub fn published(&self) -> u64 {
        self.inner.published.load(Ordering::Relaxed)
    }

    /// How many times a script was loaded: once each on connect, and again
    /// after the server forgot it.
    pub fn script_loads(&self) -> u64 {
        self.inner.script_loads.load(Ordering::Relaxed)
    }
}

impl Inner {
    fn record_key(&self, digest: &[u8; 32]) -> String {
        format!("{}{{{}}}", self.prefix, hex::encode(digest))
    }

    /// The next connection, in turn.
    fn connection(&self) -> Connection {
        let at = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        self.connections[at].clone()
    }
}

impl Store for RedisStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        StoreFuture::boxed(self.inner.claim(req))
    }

    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.complete(claim, finished))
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.release(claim))
    }

    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.renew(claim, lease))
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    /// A third of the lease: two renewals may fail or come late before
    /// another host takes the claim over.
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        Some(lease / 3)
    }
}

impl Records for RedisStore {
    /// Returns 0 at once: records leave by key expiry.
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        StoreFuture::ready(Ok(0))
    }

    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        StoreFuture::boxed(self.inner.forget(key, how))
    }

    fn resolve<'a>(&'a self, key: &'a Key, how: Resolution) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(self.inner.resolve(key, how))
    }

    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        StoreFuture::boxed(self.inner.list(query))
    }

    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        StoreFuture::boxed(self.inner.inspect(key))
    }

    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        StoreFuture::boxed(self.inner.count())
    }
}
