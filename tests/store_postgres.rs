//! The Postgres store against a real server: the whole adversarial suite,
//! round trips counted on the wire, leases and fences, the race that READ
//! COMMITTED allows, LISTEN/NOTIFY, a server that is down, and several OS
//! processes.
//!
//! The server's address comes from `IDEMPOTENT_POSTGRES_URL`. Without it the
//! tests say they were skipped, except in CI, where they fail. Every store
//! gets a schema of its own, dropped afterwards.
#![cfg(feature = "postgres")]

mod adversarial;
mod multiprocess;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use adversarial::{PayError, Provider, fresh_run, refund_call, refund_key, usd};
use idempotent::store::PostgresStore;
use idempotent::store::postgres::deadpool_postgres;
use idempotent::store::postgres::tokio_postgres::{self, Config, NoTls};
use idempotent::{
    Call, Claim, ClaimRequest, ClaimState, ConflictReason, Ending, Error, Finished, Key, Recorded,
    Store, StoreError, StoreFuture, StoreResult, ToolId,
};
use multiprocess::{FileProvider, LEASE_MS, PROVIDER, Proc, RUN, final_word};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const URL: &str = "IDEMPOTENT_POSTGRES_URL";

/// The server's URL, or `None` (after saying so) outside CI.
fn url() -> Option<String> {
    match std::env::var(URL) {
        Ok(url) => Some(url),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("{URL} must be set in CI: the Postgres store is tested against a real server")
        }
        Err(_) => {
            println!("skipped: {URL} is not set");
            None
        }
    }
}

fn unique_schema() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "idempotent_test_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A connection for the test's own statements.
async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("Postgres at {URL} must be reachable: {e}"));
    tokio::spawn(connection);
    client
}

fn config_in(url: &str, schema: &str) -> Config {
    let mut config: Config = url.parse().expect("a Postgres URL");
    config.options(format!("-c search_path={schema}"));
    config
}

/// A fresh schema, dropped when this is.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    async fn new() -> Option<Schema> {
        let url = url()?;
        let name = unique_schema();
        admin(&url)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a schema");
        Some(Schema { url, name })
    }

    fn config(&self) -> Config {
        config_in(&self.url, &self.name)
    }

    /// A store of its own (its own pool and listener) in this schema, migrated.
    async fn store(&self) -> PostgresStore {
        let store = PostgresStore::from_config(self.config()).expect("a store");
        store.migrate().await.expect("migrate");
        store
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Dropped inside the test's runtime: drop the schema from a thread
        // of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let _ = admin(&url)
                    .await
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await;
            });
        });
        let _ = dropped.join();
    }
}

/// A store that owns its schema.
struct InSchema {
    store: PostgresStore,
    _schema: Schema,
}

impl Store for InSchema {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimState>> {
        self.store.claim(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Finished,
    ) -> StoreFuture<'a, StoreResult<()>> {
        self.store.complete(claim, finished)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.store.release(claim)
    }
    fn extend<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        self.store.extend(claim, lease)
    }
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        self.store.purge_expired()
    }
    fn forget<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<bool>> {
        self.store.forget(key)
    }
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        self.store.renew_every(lease)
    }
}

async fn postgres() -> Option<Arc<dyn Store>> {
    let schema = Schema::new().await?;
    let store = schema.store().await;
    Some(Arc::new(InSchema {
        store,
        _schema: schema,
    }))
}

adversarial_suite!(postgres(), callers = 200);

static TOOL: ToolId = ToolId::new("shop::refund_order");

fn request<'a>(key: &'a Key, lease: Duration) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool: &TOOL,
        fingerprint: usd(42),
        lease,
        retention: Duration::from_secs(3600),
    }
}

fn finished(json: &str) -> Finished {
    Finished {
        ending: Ending::Ok,
        value: Recorded::from_json(json),
        finished_at: SystemTime::now(),
    }
}

async fn claimed(store: &dyn Store, req: ClaimRequest<'_>) -> Claim {
    match store.claim(req).await.expect("claim") {
        ClaimState::Claimed(claim) => claim,
        other => panic!("expected to hold the claim, got {other:?}"),
    }
}

/// A TCP proxy in front of the server that counts round trips: every
/// `Sync` (extended protocol) and `Query` (simple protocol) message a client
/// sends ends one.
struct RoundTrips {
    addr: SocketAddr,
    count: Arc<AtomicU64>,
}

impl RoundTrips {
    async fn start(upstream: SocketAddr) -> RoundTrips {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let count = Arc::new(AtomicU64::new(0));
        let counted = count.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(upstream).await.expect("upstream");
                tokio::spawn(relay(client, server, counted.clone()));
            }
        });
        RoundTrips { addr, count }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

async fn relay(client: TcpStream, server: TcpStream, count: Arc<AtomicU64>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    // Untyped start-up messages (an SSL request, then the start-up packet).
    loop {
        let Ok(len) = from_client.read_u32().await else {
            return;
        };
        let mut body = vec![0; len as usize - 4];
        if from_client.read_exact(&mut body).await.is_err() {
            return;
        }
        let mut packet = len.to_be_bytes().to_vec();
        packet.extend_from_slice(&body);
        if to_server.write_all(&packet).await.is_err() {
            return;
        }
        let code = body
            .get(..4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        if code != Some(80_877_103) && code != Some(80_877_104) {
            break;
        }
    }
    loop {
        let Ok(tag) = from_client.read_u8().await else {
            return;
        };
        let Ok(len) = from_client.read_u32().await else {
            return;
        };
        let mut body = vec![0; len as usize - 4];
        if from_client.read_exact(&mut body).await.is_err() {
            return;
        }
        if tag == b'S' || tag == b'Q' {
            count.fetch_add(1, Ordering::SeqCst);
        }
        let mut packet = vec![tag];
        packet.extend_from_slice(&len.to_be_bytes());
        packet.extend_from_slice(&body);
        if to_server.write_all(&packet).await.is_err() {
            return;
        }
    }
}

fn upstream(config: &Config) -> SocketAddr {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let host = if host == "localhost" {
        "127.0.0.1".to_owned()
    } else {
        host
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}").parse().expect("a TCP address")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_a_completion_a_replay_and_a_wait_take_one_round_trip_each() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    schema.store().await;
    let direct = schema.config();
    let proxy = RoundTrips::start(upstream(&direct)).await;
    let mut through = Config::new();
    through.host("127.0.0.1").port(proxy.addr.port());
    if let Some(user) = direct.get_user() {
        through.user(user);
    }
    if let Some(password) = direct.get_password() {
        through.password(password);
    }
    if let Some(dbname) = direct.get_dbname() {
        through.dbname(dbname);
    }
    if let Some(options) = direct.get_options() {
        through.options(options);
    }
    // One connection through the proxy; the listener connects directly.
    let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(through, NoTls))
        .max_size(1)
        .build()
        .expect("pool");
    let store = PostgresStore::from_pool(pool).listen_with(direct, NoTls);
    assert!(store.listening().await);

    // Warm up: statements are prepared once per connection.
    let warm = refund_key(&fresh_run(), "warm-up");
    let claim = claimed(&store, request(&warm, Duration::from_secs(30))).await;
    store
        .complete(&claim, finished("0"))
        .await
        .expect("complete");
    store
        .claim(request(&warm, Duration::from_secs(30)))
        .await
        .expect("replay");
    let warm = refund_key(&fresh_run(), "warm-up-2");
    let claim = claimed(&store, request(&warm, Duration::from_secs(30))).await;
    store.release(&claim).await.expect("release");

    let key = refund_key(&fresh_run(), "1182");
    let measure = |what: &'static str, before: u64| {
        let trips = proxy.count() - before;
        println!("measured: {what}: {trips} round trip(s)");
        trips
    };

    let before = proxy.count();
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    assert_eq!(measure("a fresh claim", before), 1);

    let before = proxy.count();
    let in_flight = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    let ClaimState::InFlight(woken) = in_flight else {
        panic!("expected the claim in flight, got {in_flight:?}")
    };
    assert_eq!(measure("a claim that finds one in flight", before), 1);

    let before = proxy.count();
    store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    assert_eq!(measure("a completion", before), 1);

    let before = proxy.count();
    tokio::time::timeout(Duration::from_secs(1), woken)
        .await
        .expect("the waiter is woken by the completion's notification");
    assert_eq!(measure("waking on a notification", before), 0);

    let before = proxy.count();
    let replay = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(replay, ClaimState::Completed(_)), "{replay:?}");
    assert_eq!(measure("a replay", before), 1);

    let other = refund_key(&fresh_run(), "1183");
    let before = proxy.count();
    let claim = claimed(&store, request(&other, Duration::from_secs(30))).await;
    store.release(&claim).await.expect("release");
    assert_eq!(measure("a claim and a release", before), 2);

    let before = proxy.count();
    let conflict = store
        .claim(ClaimRequest {
            fingerprint: usd(41),
            ..request(&key, Duration::from_secs(30))
        })
        .await
        .expect("claim");
    assert!(matches!(conflict, ClaimState::Conflict { .. }));
    assert_eq!(measure("a conflict", before), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn measured_latency_of_a_guarded_call_on_the_local_server() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(schema.store().await);
    let run = fresh_run();
    let n = 200u32;
    let started = Instant::now();
    for order in 0..n {
        refund_call(&store, &run, &order.to_string(), 42)
            .run(async { Ok::<_, PayError>(order) })
            .await
            .expect("fresh");
    }
    let fresh = started.elapsed() / n;
    let started = Instant::now();
    for order in 0..n {
        let outcome = refund_call(&store, &run, &order.to_string(), 42)
            .run(async { Ok::<_, PayError>(order) })
            .await
            .expect("replay");
        assert!(outcome.is_replay());
    }
    let replay = started.elapsed() / n;
    println!("measured: a fresh call (claim + complete) {fresh:?}, a replay {replay:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_past_its_lease_is_taken_over_with_a_higher_fence_and_the_stale_holder_changes_nothing()
 {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    let key = refund_key(&fresh_run(), "1182");
    // A zero lease has run out the moment it is written: the holder stands
    // for one whose process died.
    let stale = claimed(&store, request(&key, Duration::ZERO)).await;
    assert!(!stale.taken_over);
    let current = claimed(&store, request(&key, Duration::from_secs(30))).await;
    assert!(current.taken_over, "the new holder must know it took over");
    assert!(current.fence > stale.fence, "a takeover bumps the fence");
    assert_ne!(current.owner, stale.owner);

    assert!(matches!(
        store.extend(&stale, Duration::from_secs(30)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.complete(&stale, finished(r#""stale""#)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&stale).await,
        Err(StoreError::LeaseLost)
    ));
    store
        .complete(&current, finished(r#""current""#))
        .await
        .expect("the current holder completes");
    match store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimState::Completed(done) => {
            assert_eq!(done.value.to_json().expect("json"), r#""current""#)
        }
        other => panic!("expected the current holder's result, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_that_ran_out_is_not_taken_over_by_other_arguments() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    let key = refund_key(&fresh_run(), "1182");
    let crashed = claimed(&store, request(&key, Duration::ZERO)).await;
    let other = store
        .claim(ClaimRequest {
            fingerprint: usd(41),
            ..request(&key, Duration::from_secs(30))
        })
        .await
        .expect("claim");
    assert!(
        matches!(
            other,
            ClaimState::Conflict {
                reason: ConflictReason::Arguments,
                ..
            }
        ),
        "{other:?}"
    );
    assert!(matches!(
        store.complete(&crashed, finished("1")).await,
        Ok(())
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn extending_a_lease_keeps_the_claim_from_being_taken_over() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    let key = refund_key(&fresh_run(), "1182");
    let holder = claimed(&store, request(&key, Duration::ZERO)).await;
    store
        .extend(&holder, Duration::from_secs(60))
        .await
        .expect("extend");
    let other = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(other, ClaimState::InFlight(_)), "{other:?}");
    assert_eq!(
        store.renew_every(Duration::from_secs(30)),
        Some(Duration::from_secs(10))
    );
    store
        .complete(&holder, finished("1"))
        .await
        .expect("complete");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_guard_renews_the_lease_while_a_long_action_runs() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(schema.store().await);
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let entered = Arc::new(tokio::sync::Notify::new());
    let finish = Arc::new(tokio::sync::Notify::new());
    let lease = Duration::from_millis(150);
    let holder = {
        let (store, run, provider, entered, finish) = (
            store.clone(),
            run.clone(),
            provider.clone(),
            entered.clone(),
            finish.clone(),
        );
        tokio::spawn(async move {
            refund_call(&store, &run, "1182", 42)
                .lease(lease)
                .run(async {
                    entered.notify_one();
                    finish.notified().await;
                    Ok::<_, PayError>(provider.refund("1182", 42))
                })
                .await
        })
    };
    entered.notified().await;
    // Without renewals the lease would run out six times over while this
    // duplicate waits; it must never take over.
    let duplicate = refund_call(&store, &run, "1182", 42)
        .lease(lease)
        .wait(lease * 6)
        .run(async { Ok::<_, PayError>(provider.refund("1182", 42)) })
        .await;
    assert!(
        matches!(&duplicate, Err(err) if matches!(err.guard(), Some(Error::InProgress { .. }))),
        "{duplicate:?}"
    );
    finish.notify_one();
    assert!(holder.await.expect("task").expect("holder").is_fresh());
    assert_eq!(provider.refunds(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn racing_claims_from_many_connections_check_tool_and_arguments_on_every_path() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    // Separate stores: separate pools, so the claims really race in the
    // database, where READ COMMITTED lets a loser see no row.
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(schema.store().await));
    }
    let run = fresh_run();
    let keys = 40;
    let mut claims = 0u64;
    let before: u64 = stores.iter().map(|s| s.statements()).sum();
    for order in 0..keys {
        let key = refund_key(&run, &order.to_string());
        let start = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = Vec::new();
        for caller in 0..8usize {
            let (store, key, start) = (stores[caller % 4].clone(), key.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                // Two tools, two amounts: every pairing but the winner's own
                // must conflict.
                let tool = if caller % 4 == 3 {
                    ToolId::new("mail::send_receipt")
                } else {
                    TOOL.clone()
                };
                let fingerprint = usd(if caller % 2 == 0 { 42 } else { 41 });
                start.wait().await;
                let state = store
                    .claim(ClaimRequest {
                        key: &key,
                        tool: &tool,
                        fingerprint,
                        lease: Duration::from_secs(30),
                        retention: Duration::from_secs(3600),
                    })
                    .await
                    .expect("claim");
                (tool, fingerprint, state)
            }));
        }
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("task"));
        }
        claims += results.len() as u64;
        let winners: Vec<_> = results
            .iter()
            .filter(|(_, _, s)| matches!(s, ClaimState::Claimed(_)))
            .collect();
        assert_eq!(winners.len(), 1, "exactly one claim per key");
        let (win_tool, win_fp, _) = winners[0];
        for (tool, fp, state) in &results {
            match state {
                ClaimState::Claimed(_) => {}
                ClaimState::InFlight(_) => assert!(tool == win_tool && fp == win_fp),
                ClaimState::Conflict {
                    reason: ConflictReason::OtherTool,
                    ..
                } => assert!(tool != win_tool),
                ClaimState::Conflict {
                    reason: ConflictReason::Arguments,
                    ..
                } => assert!(tool == win_tool && fp != win_fp),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let statements: u64 = stores.iter().map(|s| s.statements()).sum::<u64>() - before;
    println!(
        "measured: {claims} racing claims took {statements} statements ({} retried after losing the race)",
        statements - claims
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_on_another_connection_is_woken_by_notify_not_by_polling() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let holder_store = schema.store().await;
    let waiter_store = schema.store().await;
    assert!(waiter_store.listening().await);
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let woken = match waiter_store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimState::InFlight(woken) => woken,
        other => panic!("expected the claim in flight, got {other:?}"),
    };
    let waiting = tokio::spawn(woken);
    let completed_at = Instant::now();
    holder_store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("woken well before the 2 s recheck or the 30 s lease")
        .expect("task");
    println!(
        "measured: a waiter on another connection woke {:?} after the completion",
        completed_at.elapsed()
    );
}

/// Claims a key someone else holds, and returns the wait.
async fn in_flight(store: &dyn Store, key: &Key) -> idempotent::Wait {
    match store
        .claim(request(key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimState::InFlight(woken) => woken,
        other => panic!("expected the claim in flight, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_outlives_its_listening_connection_being_killed() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let holder_store = schema.store().await;
    let name = unique_schema();
    let mut config = schema.config();
    config.application_name(&name);
    let waiter_store = PostgresStore::from_config(config).expect("store");
    assert!(waiter_store.listening().await);
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let first = in_flight(&waiter_store, &key).await;

    let killed = admin(&schema.url)
        .await
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND query = 'LISTEN idempotent_claims'",
            &[&name],
        )
        .await
        .expect("terminate the listener");
    assert_eq!(killed, 1, "one listening connection");
    // Notifications may be lost while it is down: every waiter is woken to
    // look again.
    tokio::time::timeout(Duration::from_secs(1), first)
        .await
        .expect("woken when the listener dropped");

    let second = in_flight(&waiter_store, &key).await;
    holder_store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    tokio::time::timeout(Duration::from_secs(3), second)
        .await
        .expect("woken by the reconnected listener or the recheck");
    assert!(matches!(
        waiter_store
            .claim(request(&key, Duration::from_secs(30)))
            .await,
        Ok(ClaimState::Completed(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_on_an_applications_pool_without_a_listener_polls_and_still_replays() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    schema.store().await;
    let pool =
        deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(schema.config(), NoTls))
            .max_size(4)
            .build()
            .expect("pool");
    let holder_store = schema.store().await;
    let polling = PostgresStore::from_pool(pool);
    assert!(!polling.listening().await, "no listener was given");
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let woken = match polling
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimState::InFlight(woken) => woken,
        other => panic!("expected the claim in flight, got {other:?}"),
    };
    let waiting = tokio::spawn(woken);
    holder_store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    // Polls back off to 250 ms; the lease has 30 s left.
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the poll sees the completion")
        .expect("task");
    match polling
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimState::Completed(done) => assert_eq!(done.value.to_json().expect("json"), "1"),
        other => panic!("expected a replay, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_is_byte_identical_to_the_recorded_json() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    let key = refund_key(&fresh_run(), "1182");
    let big = "é".repeat(300_000);
    let json = format!(
        "{{ \"z\" : 1.50, \"a\": [ {{\"nested\": {{\"deep\": [null, true, \"\\u00e9\\n\"]}}}} ], \
         \"emoji\": \"\u{1F4B8}\", \"big\": \"{big}\" }}"
    );
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    store
        .complete(&claim, finished(&json))
        .await
        .expect("complete");
    match store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimState::Completed(done) => {
            assert_eq!(done.ending, Ending::Ok);
            assert!(done.value.to_json().expect("json") == json.as_str());
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_of_a_hundred_kilobytes_is_claimed_and_replayed() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(schema.store().await);
    let long = "k".repeat(100 * 1024);
    let key = Key::builder()
        .part("run", &fresh_run())
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("order_id", &long))
        .and_then(|b| b.finish())
        .expect("key");
    let provider = Provider::default();
    for _ in 0..2 {
        Call::new("shop::refund_order", key.clone())
            .store(&store)
            .run(async { Ok::<_, PayError>(provider.refund("1182", 42)) })
            .await
            .expect("outcome");
    }
    assert_eq!(provider.refunds(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await.purge_batch(10);
    let run = fresh_run();
    for order in 0..25 {
        let key = refund_key(&run, &order.to_string());
        let claim = claimed(
            &store,
            ClaimRequest {
                retention: Duration::ZERO,
                ..request(&key, Duration::from_secs(30))
            },
        )
        .await;
        store
            .complete(&claim, finished("1"))
            .await
            .expect("complete");
    }
    let held_key = refund_key(&run, "held");
    let held = claimed(
        &store,
        ClaimRequest {
            retention: Duration::ZERO,
            ..request(&held_key, Duration::from_secs(30))
        },
    )
    .await;
    let live_key = refund_key(&run, "live");
    let live = claimed(&store, request(&live_key, Duration::from_secs(30))).await;
    store
        .complete(&live, finished("2"))
        .await
        .expect("complete");

    let before = store.statements();
    assert_eq!(store.purge_expired().await.expect("purge"), 25);
    assert_eq!(store.statements() - before, 3, "25 rows in batches of 10");
    assert!(matches!(
        store
            .claim(request(&held_key, Duration::from_secs(30)))
            .await,
        Ok(ClaimState::InFlight(_))
    ));
    assert!(matches!(
        store
            .claim(request(&live_key, Duration::from_secs(30)))
            .await,
        Ok(ClaimState::Completed(_))
    ));
    store
        .complete(&held, finished("3"))
        .await
        .expect("complete");
}

#[tokio::test(flavor = "multi_thread")]
async fn purging_while_expired_keys_are_claimed_again_never_acts_twice() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(schema.store().await);
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let orders = 50;
    for order in 0..orders {
        refund_call(&store, &run, &order.to_string(), 42)
            .retention(Duration::ZERO)
            .run(async { Ok::<_, PayError>(provider.refund("x", 42)) })
            .await
            .expect("first round");
    }
    let purger = {
        let store = store.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                store.purge_expired().await.expect("purge");
                tokio::task::yield_now().await;
            }
        })
    };
    let mut calls = Vec::new();
    for order in 0..orders {
        for _ in 0..2 {
            let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
            calls.push(tokio::spawn(async move {
                refund_call(&store, &run, &order.to_string(), 42)
                    .run(async { Ok::<_, PayError>(provider.refund("x", 42)) })
                    .await
            }));
        }
    }
    for call in calls {
        call.await.expect("task").expect("second round");
    }
    purger.await.expect("purger");
    assert_eq!(provider.refunds(), 2 * orders);
}

#[tokio::test(flavor = "multi_thread")]
async fn forgetting_removes_a_finished_record_but_never_a_held_claim() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    let run = fresh_run();
    let done_key = refund_key(&run, "done");
    let claim = claimed(&store, request(&done_key, Duration::from_secs(30))).await;
    store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    let held_key = refund_key(&run, "held");
    let held = claimed(&store, request(&held_key, Duration::from_secs(30))).await;
    assert!(store.forget(&done_key).await.expect("forget"));
    assert!(!store.forget(&held_key).await.expect("forget"));
    claimed(&store, request(&done_key, Duration::from_secs(30))).await;
    store
        .complete(&held, finished("2"))
        .await
        .expect("complete");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_down_is_unavailable_and_nothing_runs() {
    // Port 1 on the loopback: nothing listens there.
    let down = "postgres://postgres@127.0.0.1:1/test";
    let connected = PostgresStore::connect(down).await;
    assert!(
        matches!(connected, Err(StoreError::Unavailable(_))),
        "{connected:?}"
    );
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect_lazy(down).expect("a lazy store"));
    let provider = Provider::default();
    let refused = refund_call(&store, &fresh_run(), "1182", 42)
        .run(async { Ok::<_, PayError>(provider.refund("1182", 42)) })
        .await;
    match &refused {
        Err(err) => assert!(
            matches!(err.guard(), Some(Error::Store(StoreError::Unavailable(_)))),
            "{err:?}"
        ),
        Ok(outcome) => panic!("the action ran without a store: {outcome:?}"),
    }
    assert_eq!(provider.refunds(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_schema_says_to_migrate_and_nothing_runs() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> =
        Arc::new(PostgresStore::from_config(schema.config()).expect("store"));
    let provider = Provider::default();
    let refused = refund_call(&store, &fresh_run(), "1182", 42)
        .run(async { Ok::<_, PayError>(provider.refund("1182", 42)) })
        .await;
    let err = refused.expect_err("no table, no action");
    let message = match err.guard() {
        Some(Error::Store(StoreError::Backend(source))) => source.to_string(),
        other => panic!("expected a backend error, got {other:?}"),
    };
    assert!(message.contains("migrate()"), "{message}");
    assert_eq!(provider.refunds(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn migrating_from_several_processes_at_once_succeeds() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let mut migrations = Vec::new();
    for _ in 0..4 {
        let store = PostgresStore::from_config(schema.config()).expect("store");
        migrations.push(tokio::spawn(async move { store.migrate().await }));
    }
    for migration in migrations {
        migration.await.expect("task").expect("migrate");
    }
    schema.store().await.migrate().await.expect("and again");
}

#[test]
fn the_schema_a_dba_applies_by_hand_is_the_one_migrate_applies() {
    let schema = idempotent::store::postgres::POSTGRES_SCHEMA;
    assert!(schema.contains("CREATE TABLE IF NOT EXISTS idempotent_claims"));
    assert!(schema.contains("key_digest  bytea"));
    assert!(schema.contains("result      text"));
}

// Several processes on one database.

const ENTRY: &str = "child_process";

/// Not a test of its own: the entry point of the child processes that the
/// tests below start. In a normal run it returns at once.
#[test]
fn child_process() {
    let Some(role) = multiprocess::role() else {
        return;
    };
    let url = std::env::var(URL).expect("the server's URL");
    let schema = std::env::var("IDEMPOTENT_TEST_SCHEMA").expect("the schema");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = PostgresStore::from_config(config_in(&url, &schema)).expect("store");
        assert!(store.listening().await, "the child listens for completions");
        multiprocess::play(&role, Arc::new(store)).await;
    });
}

struct Scene {
    schema: Schema,
    dir: tempfile::TempDir,
    run: String,
}

impl Scene {
    async fn new() -> Option<Scene> {
        let schema = Schema::new().await?;
        schema.store().await;
        Some(Scene {
            schema,
            dir: tempfile::tempdir().expect("a temporary directory"),
            run: fresh_run().to_string(),
        })
    }

    fn provider(&self) -> std::path::PathBuf {
        self.dir.path().join("provider.log")
    }

    fn spawn(&self, role: &str, lease: Option<Duration>) -> Proc {
        let mut env = vec![
            (URL, self.schema.url.clone()),
            ("IDEMPOTENT_TEST_SCHEMA", self.schema.name.clone()),
            (RUN, self.run.clone()),
            (PROVIDER, self.provider().display().to_string()),
        ];
        if let Some(lease) = lease {
            env.push((LEASE_MS, lease.as_millis().to_string()));
        }
        Proc::spawn(ENTRY, role, &env)
    }

    fn refunds(&self) -> usize {
        FileProvider::refunds(&self.provider())
    }

    /// The claim row's fence and takeover flag, read directly.
    async fn fence(&self) -> (i64, bool) {
        let key = multiprocess_key(&self.run);
        let row = admin(&self.schema.url)
            .await
            .query_one(
                &format!(
                    "SELECT fence, taken_over FROM {}.idempotent_claims WHERE key_digest = $1",
                    self.schema.name
                ),
                &[&key.digest().as_slice()],
            )
            .await
            .expect("the claim row");
        (row.get(0), row.get(1))
    }
}

fn multiprocess_key(run: &str) -> Key {
    Key::builder()
        .part("run", &idempotent::Run::new(run).expect("run"))
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("order_id", "1182"))
        .and_then(|b| b.finish())
        .expect("key")
}

#[tokio::test(flavor = "multi_thread")]
async fn six_processes_refunding_the_same_order_at_once_refund_it_once() {
    let Some(scene) = Scene::new().await else {
        return;
    };
    let scene = Arc::new(scene);
    let outcome = tokio::task::spawn_blocking({
        let scene = scene.clone();
        move || {
            let mut procs: Vec<Proc> = (0..6).map(|_| scene.spawn("race", None)).collect();
            for proc in &mut procs {
                proc.expect("ready");
            }
            for proc in &mut procs {
                proc.tell("go");
            }
            let mut fresh = Vec::new();
            let mut values = Vec::new();
            for proc in &mut procs {
                let (is_fresh, value) = final_word(proc).expect("an outcome");
                if is_fresh {
                    fresh.push(proc.name.clone());
                }
                values.push(value);
            }
            for proc in procs {
                proc.finish();
            }
            (fresh, values)
        }
    })
    .await
    .expect("the processes");
    let (fresh, values) = outcome;
    assert_eq!(fresh.len(), 1, "exactly one process acts: {fresh:?}");
    assert_eq!(
        scene.refunds(),
        1,
        "exactly one refund reached the provider"
    );
    assert!(
        values.iter().all(|v| *v == values[0]),
        "every process got the one refund: {values:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_killed_mid_action_is_taken_over_once_after_its_lease() {
    let Some(scene) = Scene::new().await else {
        return;
    };
    let scene = Arc::new(scene);
    let lease = Duration::from_millis(1000);
    let (killed_at, acted_at, fresh) = tokio::task::spawn_blocking({
        let scene = scene.clone();
        move || {
            let mut holder = scene.spawn("hold", Some(lease));
            holder.expect("acting");
            holder.kill_9();
            let killed_at = multiprocess::now_ms();
            let mut procs: Vec<Proc> = (0..3)
                .map(|_| scene.spawn("takeover", Some(lease)))
                .collect();
            let mut acted_at = Vec::new();
            let mut fresh = 0;
            for proc in &mut procs {
                let report = multiprocess::report_of(proc);
                acted_at.extend(report.acted_at);
                fresh += usize::from(report.fresh());
            }
            for proc in procs {
                proc.finish();
            }
            (killed_at, acted_at, fresh)
        }
    })
    .await
    .expect("the processes");
    assert_eq!(fresh, 1, "exactly one process takes the claim over");
    assert_eq!(acted_at.len(), 1);
    assert_eq!(
        scene.refunds(),
        1,
        "the killed holder never reached the provider"
    );
    assert_eq!(
        scene.fence().await,
        (2, true),
        "one takeover, one fence bump"
    );
    let earliest = killed_at + lease.as_millis() * 2 / 3;
    assert!(
        acted_at[0] + 50 >= earliest,
        "taken over {} ms after the kill, before the lease ran out",
        acted_at[0].saturating_sub(killed_at)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so() {
    let Some(scene) = Scene::new().await else {
        return;
    };
    let scene = Arc::new(scene);
    tokio::task::spawn_blocking({
        let scene = scene.clone();
        move || {
            let lease = Duration::from_millis(300);
            let mut holder = scene.spawn("hold", Some(lease));
            holder.expect("acting");
            holder.kill_9();
            let mut unknown = scene.spawn("unknown", Some(lease));
            assert_eq!(final_word(&mut unknown), Err("unknown-outcome".to_owned()));
            unknown.finish();
            let mut later = scene.spawn("takeover", Some(lease));
            assert_eq!(final_word(&mut later), Err("unknown-outcome".to_owned()));
            later.finish();
        }
    })
    .await
    .expect("the processes");
    assert_eq!(scene.refunds(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result() {
    let Some(scene) = Scene::new().await else {
        return;
    };
    let scene = Arc::new(scene);
    tokio::task::spawn_blocking({
        let scene = scene.clone();
        move || {
            let lease = Duration::from_millis(500);
            let mut stale = scene.spawn("stale", Some(lease));
            stale.expect("acting");
            stale.pause();
            let mut current = scene.spawn("takeover", Some(lease));
            current.expect("acting");
            let (fresh, value) = final_word(&mut current).expect("the takeover's outcome");
            assert!(fresh);
            current.finish();
            stale.resume();
            stale.tell("finish");
            assert_eq!(final_word(&mut stale), Err("lease-lost".to_owned()));
            stale.finish();
            let mut after = scene.spawn("takeover", Some(lease));
            assert_eq!(final_word(&mut after), Ok((false, value)));
            after.finish();
        }
    })
    .await
    .expect("the processes");
    assert_eq!(scene.refunds(), 1);
}
