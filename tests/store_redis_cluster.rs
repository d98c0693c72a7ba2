//! The Redis store on a Redis Cluster the test starts itself (three
//! primaries, three replicas; see [`redis_cluster`]): the whole conformance
//! suite, a failover of a primary under load, the wake-up listener
//! moving to another node when its node dies, and a holder cut off from the
//! Cluster mid-action (`redis_cluster::partition`).
//!
//! The suite runs on one cluster, started before the trials and named to
//! the suite's child processes by `IDEMPOTENT_REDIS_CLUSTER_NODES`. The
//! failover, the killed node and the partitions run on a second cluster of
//! their own, one after the other, so that the suite's timings never share a failover.
//! Without `redis-server` and `redis-cli` on the PATH every case is
//! reported as ignored, except in CI, where it fails.

/// The partition cases on a cluster, beside the cluster's harness.
#[path = "redis_cluster/partition.rs"]
mod cluster_partition;
mod harness;
mod partition;
mod redis_cluster;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use idempotent_tools::RedisStore;
use idempotent_tools::store::Store;
use idempotent_tools::store::redis::{RECHECK_EVERY, redis};
use idempotent_tools_testing::conformance::kit::{
    CountingProvider as Provider, Ends, Holder, fresh_run, in_flight, refund_call, refund_key,
    refunds,
};
use idempotent_tools_testing::conformance::{Restart, Scope, Suite, kit};
use redis::aio::MultiplexedConnection;
use redis_cluster::{LocalCluster, Ports, parse_nodes, url};

/// The suite's cluster's node URLs, comma-separated: set by this binary for
/// itself and its children.
const NODES: &str = "IDEMPOTENT_REDIS_CLUSTER_NODES";

fn nodes() -> Vec<String> {
    std::env::var(NODES)
        .expect("the cases run only with the cluster's nodes")
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// The key prefix of a case of the conformance suite, shared by the case's
/// child processes.
fn prefix_of(scope: &Scope) -> String {
    format!("idempotent-conformance:{}:", scope.id())
}

/// The case's store, under a prefix of its own.
async fn in_scope(scope: Scope) -> RedisStore {
    let store = RedisStore::builder_cluster(nodes())
        .prefix(prefix_of(&scope))
        .connect()
        .await
        .expect("a store on the cluster");
    if scope.is_child() {
        assert!(store.listening().await, "the child listens for wake-ups");
    }
    store
}

/// A Redis Cluster of the case's own, all six nodes keeping every
/// acknowledged write on disk: the suite's restart cases stop every node at
/// once and start them again over their data.
struct RestartableCluster(LocalCluster);

impl Restart for RestartableCluster {
    async fn stop(&mut self) {
        tokio::task::block_in_place(|| self.0.stop());
    }
    async fn start(&mut self) {
        tokio::task::block_in_place(|| self.0.restart());
    }
}

/// A store on a cluster of the case's own, for the restart cases.
async fn on_a_cluster_of_its_own(_scope: Scope) -> (RedisStore, RestartableCluster) {
    let cluster =
        tokio::task::block_in_place(|| LocalCluster::start_keeping(&redis_cluster::free_ports()));
    let store = RedisStore::builder_cluster(cluster.urls())
        .connect()
        .await
        .expect("a store on the case's cluster");
    (store, RestartableCluster(cluster))
}

/// A connection to one node, for the test's own commands.
async fn node(port: u16) -> MultiplexedConnection {
    redis::Client::open(url(port))
        .expect("a node's URL")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("the node on port {port} must answer: {e}"))
}

fn port_of(url: &str) -> u16 {
    url.rsplit_once(':')
        .and_then(|(_, port)| port.trim_end_matches('/').parse().ok())
        .expect("a node URL with a port")
}

/// Deletes every key the case left under its prefix, on every primary.
async fn drop_prefix(scope: Scope) {
    let pattern = format!("{}*", prefix_of(&scope));
    for url in nodes() {
        let mut node = node(port_of(&url)).await;
        let role: String = redis::cmd("ROLE")
            .query_async::<Vec<redis::Value>>(&mut node)
            .await
            .ok()
            .and_then(|role| role.into_iter().next())
            .and_then(|first| redis::from_redis_value(first).ok())
            .unwrap_or_default();
        if role != "master" {
            continue;
        }
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut node)
            .await
            .expect("keys");
        for key in keys {
            let _: Result<i64, _> = redis::cmd("DEL").arg(key).query_async(&mut node).await;
        }
    }
}

/// The second cluster, for the cases that fail a primary over or kill a
/// node; started by the first of them, and killed when the binary exits
/// (its nodes die with it).
fn disrupted() -> &'static tokio::sync::Mutex<LocalCluster> {
    static CLUSTER: OnceLock<tokio::sync::Mutex<LocalCluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| tokio::sync::Mutex::new(LocalCluster::start(&redis_cluster::free_ports())))
}

/// Starts the second cluster off the runtime's threads, and holds it for
/// one case at a time.
async fn lock_disrupted() -> tokio::sync::MutexGuard<'static, LocalCluster> {
    let cluster = tokio::task::spawn_blocking(disrupted)
        .await
        .expect("the cluster starts");
    cluster.lock().await
}

/// The cluster's nodes as the node on `port` lists them.
async fn topology(port: u16) -> Vec<redis_cluster::Listed> {
    let listed: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut node(port).await)
        .await
        .expect("cluster nodes");
    parse_nodes(&listed)
}

/// Whether the node on `port` answers a `PING`.
async fn answers(port: u16) -> bool {
    let Ok(client) = redis::Client::open(url(port)) else {
        return false;
    };
    match client.get_multiplexed_async_connection().await {
        Ok(mut connection) => redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .is_ok(),
        Err(_) => false,
    }
}

/// A primary whose replica answers, and that replica.
async fn primary_and_replica(urls: &[String]) -> (redis_cluster::Listed, redis_cluster::Listed) {
    primaries_and_replicas(urls).await.swap_remove(0)
}

/// Every primary whose replica answers, with that replica, by port; at
/// least one.
async fn primaries_and_replicas(
    urls: &[String],
) -> Vec<(redis_cluster::Listed, redis_cluster::Listed)> {
    let mut listed = Vec::new();
    for url in urls {
        if answers(port_of(url)).await {
            listed = topology(port_of(url)).await;
            break;
        }
    }
    listed.sort_by_key(|n| n.port);
    let mut pairs = Vec::new();
    for replica in listed.iter().filter(|n| !n.primary && !n.failing) {
        let Some(primary) = listed
            .iter()
            .find(|n| Some(&n.id) == replica.replica_of.as_ref())
        else {
            continue;
        };
        if answers(replica.port).await && answers(primary.port).await {
            pairs.push((primary.clone(), replica.clone()));
        }
    }
    assert!(
        !pairs.is_empty(),
        "no primary with a live replica: {listed:?}"
    );
    pairs
}

/// The slot of a Redis key, as the cluster computes it.
async fn slot_of(port: u16, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut node(port).await)
        .await
        .expect("keyslot")
}

/// Orders of `run` whose records fall (`on`) or do not fall on `primary`.
async fn orders(
    store: &RedisStore,
    run: &idempotent_tools::Run,
    primary: &redis_cluster::Listed,
    from: usize,
    on: bool,
    count: usize,
) -> Vec<String> {
    let mut chosen = Vec::new();
    let mut n = from;
    while chosen.len() < count {
        let order = format!("o{n}");
        let record = store.record_key(&refund_key(run, &order));
        if primary.serves(slot_of(primary.port, &record).await) == on {
            chosen.push(order);
        }
        n += 1;
    }
    chosen
}

/// Whether the node on `port` is a primary now.
async fn is_primary(port: u16) -> bool {
    let replication: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut node(port).await)
        .await
        .unwrap_or_default();
    replication.contains("role:master")
}

type Outcome = Result<
    idempotent_tools::Outcome<kit::Refunded>,
    idempotent_tools_testing::conformance::kit::RefundError,
>;

/// Many calls in flight (several keys, several duplicates each, most on
/// one primary) while that primary's replica takes over with
/// `CLUSTER FAILOVER`: each key's refund reaches the provider once, every
/// caller gets it, fresh or as a replay, and no waiter sleeps out its wait.
async fn a_failover_under_load_does_nothing_twice_and_loses_no_call() {
    let cluster = lock_disrupted().await;
    let urls = cluster.urls();
    let (primary, replica) = primary_and_replica(&urls).await;
    let redis_store = RedisStore::builder_cluster(urls.clone())
        .prefix(format!("idempotent-failover:{}:", kit::unique_id()))
        .reconnect_within(Duration::from_secs(30))
        .connect()
        .await
        .expect("a store on the cluster");
    let redis_store = Arc::new(redis_store);
    let store: Arc<dyn Store> = redis_store.clone();
    let provider = Arc::new(Provider::default());
    let run = fresh_run();
    let held_on = orders(&redis_store, &run, &primary, 0, true, 8).await;
    let held_off = orders(&redis_store, &run, &primary, 0, false, 4).await;
    let fresh_on = orders(&redis_store, &run, &primary, 1000, true, 6).await;
    const DUPLICATES: usize = 4;

    // Every first call holds its claim, its action waiting to finish.
    let mut holders = Vec::new();
    for order in held_on.iter().chain(&held_off) {
        let call = refund_call(&store, &run, order, 42);
        holders.push(Holder::start(call, provider.clone(), Ends::Refunding).await);
    }
    // And duplicates wait on them.
    let call = |order: String| {
        let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let outcome: Outcome = refund_call(&store, &run, &order, 42)
                .run(refunds(&provider, 42))
                .await;
            (order, outcome, started.elapsed())
        })
    };
    let mut calls = Vec::new();
    for order in held_on.iter().chain(&held_off) {
        for _ in 0..DUPLICATES {
            calls.push(call(order.clone()));
        }
    }

    let failing_over = Instant::now();
    let answer: String = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query_async(&mut node(replica.port).await)
        .await
        .expect("CLUSTER FAILOVER");
    assert_eq!(answer, "OK");
    // While the replica takes over: the holders finish, more duplicates
    // and new keys arrive.
    let finished: Vec<_> = holders
        .into_iter()
        .map(|holder| tokio::spawn(holder.finish()))
        .collect();
    for order in held_on.iter().chain(&fresh_on) {
        for _ in 0..DUPLICATES {
            calls.push(call(order.clone()));
        }
    }

    // The replica is a primary now (polled: the measure of the switch).
    while !is_primary(replica.port).await {
        assert!(
            failing_over.elapsed() < Duration::from_secs(30),
            "the replica on port {} never took over",
            replica.port
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let promoted = failing_over.elapsed();
    let after = orders(&redis_store, &run, &primary, 2000, true, 1).await;
    let first_after = refund_call(&store, &run, &after[0], 42)
        .run(refunds(&provider, 42))
        .await;
    let first_after = match first_after {
        Ok(outcome) => outcome,
        Err(e) => {
            let mut seen = String::new();
            for url in &urls {
                let mut n = node(port_of(url)).await;
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut n)
                    .await
                    .unwrap_or_default();
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut n)
                    .await
                    .unwrap_or_default();
                seen.push_str(&format!(
                    "--- {url} after {:?}\n{nodes}\n{info}\n",
                    failing_over.elapsed()
                ));
            }
            panic!("the first call after the switch: {e:?}\n{seen}");
        }
    };
    assert!(first_after.is_fresh());
    let first_call_after = failing_over.elapsed();

    for holder in finished {
        let outcome = holder.await.expect("task").expect("the holder's refund");
        assert!(outcome.is_fresh(), "{outcome:?}");
    }
    let mut fresh: HashMap<String, usize> = HashMap::new();
    let mut slowest = Duration::ZERO;
    let count = calls.len();
    for call in calls {
        let (order, outcome, took) = call.await.expect("task");
        let outcome = outcome.unwrap_or_else(|e| panic!("a call on {order} was lost: {e:?}"));
        slowest = slowest.max(took);
        if outcome.is_fresh() {
            *fresh.entry(order).or_default() += 1;
        } else {
            assert!(outcome.is_replay(), "{outcome:?}");
        }
    }
    let all_done = failing_over.elapsed();
    for order in &fresh_on {
        assert_eq!(fresh.get(order), Some(&1), "one fresh call on {order}");
    }
    for order in held_on.iter().chain(&held_off) {
        assert_eq!(fresh.get(order), None, "the holder of {order} acted");
    }
    let keys = held_on.len() + held_off.len() + fresh_on.len() + 1;
    assert_eq!(provider.refunds(), keys, "one refund per key");
    // No waiter slept out its wait: every one of them got the result well
    // within a few rechecks of the switch.
    assert!(
        all_done < promoted + 5 * RECHECK_EVERY,
        "the callers took {all_done:?}, the switch {promoted:?}"
    );
    assert!(
        !is_primary(primary.port).await,
        "the former primary follows"
    );
    println!(
        "measured: CLUSTER FAILOVER to the replica taking over {promoted:?}; \
         to the first call after it {first_call_after:?}; {count} calls on {keys} keys \
         all done {all_done:?} after it, the slowest call {slowest:?}"
    );
}

/// Polls until the node on `port` is a primary, from `since`, and returns
/// how long after `since` it was (polled: the measure of the switch).
async fn until_primary(port: u16, since: Instant) -> Duration {
    while !is_primary(port).await {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the replica on port {port} never took over"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    since.elapsed()
}

/// Refunds `order` on a task of its own, and how long after `since` the
/// call ended.
fn timed_call(
    store: &Arc<dyn Store>,
    run: &idempotent_tools::Run,
    provider: &Arc<Provider>,
    order: &str,
    since: Instant,
) -> tokio::task::JoinHandle<(Outcome, Duration)> {
    let (store, run, provider, order) = (
        store.clone(),
        run.clone(),
        provider.clone(),
        order.to_owned(),
    );
    tokio::spawn(async move {
        let outcome = refund_call(&store, &run, &order, 42)
            .run(refunds(&provider, 42))
            .await;
        (outcome, since.elapsed())
    })
}

/// How long a primary's slots take to serve calls again, on an idle
/// cluster of the case's own: after a planned `CLUSTER FAILOVER` of one
/// primary, and after another primary is killed (`kill -9`; the others
/// count it failed after `cluster-node-timeout`, 5 s here). For each, when
/// the replica is a primary, when a call on its slots made at the switch's
/// start went through, and how long the first call made once the replica
/// is a primary took. Each key's refund reaches the provider once. Ignored
/// unless asked for: it starts a cluster of its own.
async fn measured_a_planned_and_a_killed_failover() {
    let mut cluster =
        tokio::task::spawn_blocking(|| LocalCluster::start(&redis_cluster::free_ports()))
            .await
            .expect("the cluster starts");
    let urls = cluster.urls();
    let pairs = primaries_and_replicas(&urls).await;
    assert!(
        pairs.len() >= 2,
        "two shards with a live replica: {pairs:?}"
    );
    let redis_store = Arc::new(
        RedisStore::builder_cluster(urls.clone())
            .prefix(format!("idempotent-switch:{}:", kit::unique_id()))
            .reconnect_within(Duration::from_secs(30))
            .connect()
            .await
            .expect("a store on the cluster"),
    );
    let store: Arc<dyn Store> = redis_store.clone();
    let provider = Arc::new(Provider::default());
    let run = fresh_run();
    let mut measured = Vec::new();
    for (n, (primary, replica)) in pairs.iter().take(2).enumerate() {
        let planned = n == 0;
        let on = orders(&redis_store, &run, primary, 1000 * n, true, 3).await;
        let before = refund_call(&store, &run, &on[0], 42)
            .run(refunds(&provider, 42))
            .await
            .expect("a call before the switch");
        assert!(before.is_fresh());
        let switching = Instant::now();
        if planned {
            let answer: String = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query_async(&mut node(replica.port).await)
                .await
                .expect("CLUSTER FAILOVER");
            assert_eq!(answer, "OK");
        } else {
            tokio::task::block_in_place(|| cluster.kill(primary.port));
        }
        let during = timed_call(&store, &run, &provider, &on[1], switching);
        let promoted = until_primary(replica.port, switching).await;
        let after = Instant::now();
        let first_after = refund_call(&store, &run, &on[2], 42)
            .run(refunds(&provider, 42))
            .await
            .expect("the first call after the switch");
        assert!(first_after.is_fresh());
        let first_after = after.elapsed();
        let (outcome, during) = during.await.expect("task");
        let outcome = outcome.expect("the call made at the switch goes through");
        assert!(outcome.is_fresh());
        measured.push(format!(
            "{}: the replica a primary {promoted:?} after it; a call made at it went \
             through {during:?} after it; the first call made after the switch took \
             {first_after:?}",
            if planned {
                "CLUSTER FAILOVER, idle"
            } else {
                "a killed primary"
            }
        ));
    }
    assert_eq!(provider.refunds(), 6, "one refund per key");
    for line in measured {
        println!("measured: {line}");
    }
}

/// How many subscribers the node on `port` has on `channel`.
async fn subscribers(port: u16, channel: &str) -> i64 {
    let reply: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut node(port).await)
        .await
        .expect("pubsub numsub");
    reply
        .get(1)
        .and_then(|n| redis::from_redis_value_ref(n).ok())
        .unwrap_or(0)
}

/// The live nodes whose subscribers include the store's listener.
async fn listening_on(urls: &[String], channel: &str) -> Vec<u16> {
    let mut ports = Vec::new();
    for url in urls {
        let port = port_of(url);
        if answers(port).await && subscribers(port, channel).await > 0 {
            ports.push(port);
        }
    }
    ports
}

/// The store's listener subscribes on a replica; when that node dies the
/// waiters wake at once and the listener subscribes on another node, whose
/// wake-ups reach the next waiter.
async fn the_listener_moves_to_another_node_when_its_node_dies() {
    let mut cluster = lock_disrupted().await;
    let urls = cluster.urls();
    let redis_store = Arc::new(
        RedisStore::builder_cluster(urls.clone())
            .prefix(format!("idempotent-listener:{}:", kit::unique_id()))
            .connect()
            .await
            .expect("a store on the cluster"),
    );
    let store: Arc<dyn Store> = redis_store.clone();
    assert!(redis_store.listening().await);
    let channel = redis_store.wake_channel().to_owned();
    let before = listening_on(&urls, &channel).await;
    assert_eq!(before.len(), 1, "one listening connection: {before:?}");
    let listened = before[0];
    assert!(
        !is_primary(listened).await,
        "the listener keeps off the primaries"
    );

    let provider = Arc::new(Provider::default());
    let run = fresh_run();
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    let key = refund_key(&run, "1182");
    let first = in_flight(&*store, &key).await;

    let killed = Instant::now();
    tokio::task::block_in_place(|| cluster.kill(listened));
    tokio::time::timeout(RECHECK_EVERY / 2, first)
        .await
        .expect("the waiter wakes as its listener's node dies, not at its recheck");
    let woke = killed.elapsed();

    assert!(redis_store.listening().await, "the listener comes back");
    let after = listening_on(&urls, &channel).await;
    assert_eq!(after.len(), 1, "one listening connection: {after:?}");
    assert_ne!(after[0], listened, "on another node");

    let second = in_flight(&*store, &key).await;
    let published = redis_store.published();
    let completing = Instant::now();
    let outcome = holder.finish().await.expect("the holder's refund");
    assert!(outcome.is_fresh());
    tokio::time::timeout(RECHECK_EVERY / 2, second)
        .await
        .expect("the next waiter is woken through the new node");
    let woken = completing.elapsed();
    assert_eq!(redis_store.published(), published + 1);
    let replay = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("a replay");
    assert!(replay.is_replay());
    assert_eq!(provider.refunds(), 1);
    println!(
        "measured: a waiter woke {woke:?} after its listener's node died; \
         one on the new node {woken:?} after the completion"
    );
}

fn main() {
    let args = harness::Arguments::from_args();
    // The children of the suite's OS-process cases find the cluster by the
    // variable their parent set; a parent starts it.
    let mut cluster = None;
    if std::env::var_os(NODES).is_none() && !args.list {
        if redis_cluster::available() {
            let ports: Vec<Ports> = redis_cluster::free_ports();
            let urls: Vec<String> = ports.iter().map(|p| url(p.port)).collect();
            // SAFETY: no other thread runs yet, so none reads the
            // environment while it changes.
            unsafe { std::env::set_var(NODES, urls.join(",")) };
            cluster = Some(LocalCluster::start(&ports));
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs `redis-server` and `redis-cli` on the PATH for the Redis Cluster cases"
            );
        }
    }
    let mut trials = Suite::new(in_scope)
        .with_records()
        .requiring_env(NODES)
        .cleaning_up(drop_prefix)
        .racing_callers(200)
        .retaining_by_expiry()
        .counting_statements(RedisStore::round_trips)
        .restarting(on_a_cluster_of_its_own)
        .trials();
    trials.extend(trials!(NODES;
        the_listener_moves_to_another_node_when_its_node_dies,
        a_failover_under_load_does_nothing_twice_and_loses_no_call,
        cluster_partition::a_holder_cut_off_mid_action_loses_its_claim_and_the_provider_refunds_once,
        cluster_partition::a_holder_cut_off_mid_action_leaves_the_outcome_unknown_under_report_unknown,
        cluster_partition::a_holder_cut_off_mid_action_is_verified_where_the_provider_takes_no_key,
    ));
    trials.push(
        harness::trial(
            "measured_a_planned_and_a_killed_failover",
            NODES,
            measured_a_planned_and_a_killed_failover,
        )
        .with_ignored_flag(true),
    );
    let conclusion = libtest_mimic::run(&args, trials);
    drop(cluster);
    conclusion.exit()
}
