//! The Postgres store against a real server: the conformance suite (several
//! OS processes included), and what is Postgres's own: round trips counted
//! on the wire, the race that READ COMMITTED allows, LISTEN/NOTIFY, schema
//! versions, SQLSTATEs, a server that is down.
//!
//! The server's address comes from `IDEMPOTENT_POSTGRES_URL`. Without it
//! every case is reported as ignored ("needs IDEMPOTENT_POSTGRES_URL"),
//! except in CI, where it fails. Every store gets a schema of its own,
//! dropped afterwards.

mod harness;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use idempotent_tools::store::PostgresStore;
use idempotent_tools::store::postgres::tokio_postgres::{self, Config, NoTls};
use idempotent_tools::store::postgres::{PostgresStoreBuilder, deadpool_postgres};
use idempotent_tools::testing::conformance::kit::{
    self, CountingProvider as Provider, TOOL, claimed, finished, fresh_run, in_flight, refund_call,
    refund_key, refunds, request, usd,
};
use idempotent_tools::testing::conformance::{Scope, Suite};
use idempotent_tools::{
    ClaimAnswer, ClaimRequest, ConflictReason, Error, Key, Store, StoreError, ToolId,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const URL: &str = "IDEMPOTENT_POSTGRES_URL";

/// The server's URL. The harness runs a case that needs it only when it is
/// set (see `harness::trial`).
fn url() -> Option<String> {
    std::env::var(URL).ok()
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
        self.store_with(|builder| builder).await
    }

    /// A store of its own in this schema, set up as `set_up` says, migrated.
    async fn store_with(
        &self,
        set_up: impl FnOnce(PostgresStoreBuilder) -> PostgresStoreBuilder,
    ) -> PostgresStore {
        let builder = PostgresStoreBuilder::from_config(self.config());
        let store = set_up(builder).connect_lazy().expect("a store");
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

/// The schema of a case of the conformance suite.
fn schema_of(scope: &Scope) -> String {
    format!("idempotent_conformance_{}", scope.id())
}

/// The case's store, in a schema of its own, migrated, purging in the
/// batches the case asks for. A child process opens its parent's schema.
async fn in_scope(scope: Scope) -> PostgresStore {
    let url = url().expect("the suite runs only with the server's URL");
    let name = schema_of(&scope);
    if !scope.is_child() {
        admin(&url)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a schema");
    }
    let mut builder = PostgresStoreBuilder::from_config(config_in(&url, &name));
    if let Some(rows) = scope.purge_batch() {
        builder = builder.purge_batch(rows);
    }
    let store = builder.connect_lazy().expect("a store");
    if scope.is_child() {
        assert!(store.listening().await, "the child listens for completions");
    } else {
        store.migrate().await.expect("migrate");
    }
    store
}

/// Drops the case's schema.
async fn drop_schema(scope: Scope) {
    let url = url().expect("the suite runs only with the server's URL");
    admin(&url)
        .await
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            schema_of(&scope)
        ))
        .await
        .expect("drop the schema");
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
    let store = PostgresStoreBuilder::from_pool(pool)
        .listen_with(direct, NoTls)
        .connect_lazy()
        .expect("a store");
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
    // A waiter marks the held row: the release finds it marked and ends it.
    let waiting = store
        .claim(request(&warm, Duration::from_secs(30)))
        .await
        .expect("claim");
    let ClaimAnswer::InFlight(waiting) = waiting else {
        panic!("expected the claim in flight, got {waiting:?}")
    };
    let waiting = tokio::spawn(waiting);
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.release(&claim).await.expect("release");
    tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("the waiter is woken by the release's notification")
        .expect("the waiter ends");

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
    let ClaimAnswer::InFlight(woken) = in_flight else {
        panic!("expected the claim in flight, got {in_flight:?}")
    };
    assert_eq!(measure("a claim that finds one in flight", before), 1);

    // The waiter marks the held row, so that its completion notifies.
    let before = proxy.count();
    let waiter = tokio::spawn(woken);
    let marked = tokio::time::timeout(Duration::from_secs(5), async {
        while proxy.count() == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    marked.await.expect("the waiter marks the held row");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(measure("a waiter marking the held row", before), 1);

    let before = proxy.count();
    store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    assert_eq!(measure("a completion", before), 1);

    let before = proxy.count();
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("the waiter is woken by the completion's notification")
        .expect("the waiter ends");
    assert_eq!(measure("waking on a notification", before), 0);

    let before = proxy.count();
    let replay = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(replay, ClaimAnswer::Completed(_)), "{replay:?}");
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
    assert!(matches!(conflict, ClaimAnswer::Conflict { .. }));
    assert_eq!(measure("a conflict", before), 1);
}

async fn measured_latency_of_a_guarded_call_on_the_local_server() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    kit::measure_latency_of_a_guarded_call(Arc::new(schema.store().await)).await;
}

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
            .filter(|(_, _, s)| matches!(s, ClaimAnswer::Claimed(_)))
            .collect();
        assert_eq!(winners.len(), 1, "exactly one claim per key");
        let (win_tool, win_fp, _) = winners[0];
        for (tool, fp, state) in &results {
            match state {
                ClaimAnswer::Claimed(_) => {}
                ClaimAnswer::InFlight(_) => assert!(tool == win_tool && fp == win_fp),
                ClaimAnswer::Conflict {
                    reason: ConflictReason::OtherTool,
                    ..
                } => assert!(tool != win_tool),
                ClaimAnswer::Conflict {
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

async fn a_waiter_on_another_connection_is_woken_by_notify_not_by_polling() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let holder_store = schema.store().await;
    let waiter_store = schema.store().await;
    assert!(waiter_store.listening().await);
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let woken = in_flight(&waiter_store, &key).await;
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

async fn only_a_completion_a_waiter_marked_notifies() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let (listener, connection) = tokio_postgres::connect(&schema.url, NoTls)
        .await
        .expect("a listening connection");
    let (sent, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let mut connection = connection;
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let Ok(tokio_postgres::AsyncMessage::Notification(n)) = message
                && sent.send(n.payload().to_owned()).is_err()
            {
                return;
            }
        }
    });
    listener
        .batch_execute("LISTEN idempotent_claims")
        .await
        .expect("listen");
    let holder = schema.store().await;
    let waiter = schema.store().await;
    assert!(waiter.listening().await);
    // Other tests share the channel: only this test's keys count.
    let heard_for = |key: &Key, heard: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        let digest = hex(&key.digest());
        let mut count = 0;
        while let Ok(payload) = heard.try_recv() {
            count += usize::from(payload == digest);
        }
        count
    };

    let alone = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder, request(&alone, Duration::from_secs(30))).await;
    holder
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(heard_for(&alone, &mut heard), 0, "nobody waited: no NOTIFY");

    let waited = refund_key(&fresh_run(), "1183");
    let claim = claimed(&holder, request(&waited, Duration::from_secs(30))).await;
    let woken = tokio::spawn(in_flight(&waiter, &waited).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    tokio::time::timeout(Duration::from_secs(1), woken)
        .await
        .expect("the waiter is woken by the notification")
        .expect("the waiter ends");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        heard_for(&waited, &mut heard),
        1,
        "a waiter marked it: one NOTIFY"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn asynchronous_completions_record_and_replay_like_synchronous_ones() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema
        .store_with(|b| b.asynchronous_completions(true))
        .await;
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    store
        .complete(&claim, finished("7"))
        .await
        .expect("complete");
    let again = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(again, ClaimAnswer::Completed(_)), "{again:?}");
}

async fn a_waiter_outlives_its_listening_connection_being_killed() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let holder_store = schema.store().await;
    let name = unique_schema();
    let mut config = schema.config();
    config.application_name(&name);
    let waiter_store = PostgresStoreBuilder::from_config(config)
        .connect_lazy()
        .expect("store");
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
        Ok(ClaimAnswer::Completed(_))
    ));
}

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
    let polling = PostgresStoreBuilder::from_pool(pool)
        .connect_lazy()
        .expect("a store");
    assert!(!polling.listening().await, "no listener was given");
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let woken = in_flight(&polling, &key).await;
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
        ClaimAnswer::Completed(done) => assert_eq!(done.value.to_json().expect("json"), "1"),
        other => panic!("expected a replay, got {other:?}"),
    }
}

async fn a_server_that_is_down_is_unavailable_and_nothing_runs() {
    // Port 1 on the loopback: nothing listens there.
    let down = "postgres://postgres@127.0.0.1:1/test";
    let connected = PostgresStore::connect(down).await;
    assert!(
        matches!(connected, Err(StoreError::Unavailable(_))),
        "{connected:?}"
    );
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::builder(down)
            .connect_lazy()
            .expect("a lazy store"),
    );
    let provider = Provider::default();
    kit::refused_as_unavailable(&store, &fresh_run(), &provider).await;
}

async fn a_missing_schema_says_to_migrate_and_nothing_runs() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(
        PostgresStoreBuilder::from_config(schema.config())
            .connect_lazy()
            .expect("store"),
    );
    let provider = Provider::default();
    let refused = refund_call(&store, &fresh_run(), "1182", 42)
        .run(refunds(&provider, 42))
        .await;
    let err = refused.expect_err("no table, no action");
    let message = match err.guard() {
        Some(Error::Store(StoreError::Backend(source))) => source.to_string(),
        other => panic!("expected a backend error, got {other:?}"),
    };
    assert!(message.contains("migrate()"), "{message}");
    assert_eq!(provider.refunds(), 0);
}

/// The schema as stores before schema versions left it: the claims table
/// alone.
async fn downgrade_to_version_1(schema: &Schema) {
    admin(&schema.url)
        .await
        .batch_execute(&format!(
            "DROP TABLE {0}.idempotent_schema; DROP INDEX {0}.idempotent_claims_tool_state;",
            schema.name
        ))
        .await
        .expect("back to version 1");
}

async fn a_version_1_schema_is_upgraded_in_place_and_keeps_its_records() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let run = fresh_run();
    let provider = Provider::default();
    {
        let store: Arc<dyn Store> = Arc::new(schema.store().await);
        let first = refund_call(&store, &run, "1182", 42)
            .run(refunds(&provider, 42))
            .await;
        assert!(first.expect("fresh").is_fresh());
    }
    downgrade_to_version_1(&schema).await;

    let store = PostgresStoreBuilder::from_config(schema.config())
        .connect_lazy()
        .expect("store");
    assert_eq!(store.schema_version().await.expect("version"), 1);
    store.migrate().await.expect("upgrade");
    assert_eq!(
        store.schema_version().await.expect("version"),
        idempotent_tools::store::SCHEMA_VERSION
    );
    let index: i64 = admin(&schema.url)
        .await
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 \
             AND indexname = 'idempotent_claims_tool_state'",
            &[&schema.name],
        )
        .await
        .expect("indexes")
        .get(0);
    assert_eq!(index, 1, "version 2's index was created");
    let store: Arc<dyn Store> = Arc::new(store);
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await;
    assert!(again.expect("replay").is_replay());
    assert_eq!(provider.refunds(), 1);

    // check_schema upgrades in place too, without creating anything new.
    downgrade_to_version_1(&schema).await;
    let checked = PostgresStoreBuilder::from_config(schema.config())
        .connect_lazy()
        .expect("store");
    checked.check_schema().await.expect("upgrade by check");
    assert_eq!(
        checked.schema_version().await.expect("version"),
        idempotent_tools::store::SCHEMA_VERSION
    );
}

async fn a_schema_newer_than_the_code_is_refused_and_left_unchanged() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    admin(&schema.url)
        .await
        .batch_execute(&format!(
            "INSERT INTO {}.idempotent_schema (version) VALUES (99)",
            schema.name
        ))
        .await
        .expect("a newer version");
    for refused in [store.migrate().await, store.check_schema().await] {
        let err = refused.expect_err("too new");
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 99,
                    supported: 2
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("version 99"), "{err}");
    }
    let versions: i64 = admin(&schema.url)
        .await
        .query_one(
            &format!("SELECT count(*) FROM {}.idempotent_schema", schema.name),
            &[],
        )
        .await
        .expect("versions")
        .get(0);
    assert_eq!(versions, 2, "nothing was changed");
}

async fn a_schema_missing_is_not_created_by_check_schema() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = PostgresStoreBuilder::from_config(schema.config())
        .connect_lazy()
        .expect("store");
    let err = store.check_schema().await.expect_err("no schema");
    assert!(matches!(err, StoreError::MissingSchema), "{err:?}");
    assert_eq!(store.schema_version().await.expect("version"), 0);
}

async fn migrating_from_several_processes_at_once_succeeds() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let mut migrations = Vec::new();
    for _ in 0..4 {
        let store = PostgresStoreBuilder::from_config(schema.config())
            .connect_lazy()
            .expect("store");
        migrations.push(tokio::spawn(async move { store.migrate().await }));
    }
    for migration in migrations {
        migration.await.expect("task").expect("migrate");
    }
    schema.store().await.migrate().await.expect("and again");
}

fn the_schema_a_dba_applies_by_hand_is_the_one_migrate_applies() {
    let schema = idempotent_tools::store::postgres::POSTGRES_SCHEMA;
    assert!(schema.contains("CREATE TABLE IF NOT EXISTS idempotent_claims"));
    assert!(schema.contains("key_digest  bytea"));
    assert!(schema.contains("result      text"));
}

/// The messages of an error and its sources, outermost first.
fn chain(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut messages = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        messages.push(cause.to_string());
        source = cause.source();
    }
    messages
}

/// Each cause is printed once: no message repeats the one below it, as an
/// error chain (`{:#}` in anyhow) would then print it twice.
fn assert_each_cause_once(messages: &[String]) {
    for pair in messages.windows(2) {
        assert!(
            !pair[0].contains(&pair[1]),
            "`{}` repeats its cause `{}`",
            pair[0],
            pair[1]
        );
    }
}

async fn a_server_error_names_the_statement_its_sqlstate_and_the_servers_message() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    let url = url().expect("url");
    admin(&url)
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION {s}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'claims are refused today'; END $$;
             CREATE TRIGGER refuse BEFORE INSERT ON {s}.idempotent_claims
             FOR EACH ROW EXECUTE FUNCTION {s}.refuse();",
            s = schema.name
        ))
        .await
        .expect("a trigger that refuses claims");
    let store: Arc<dyn Store> = Arc::new(store);
    let provider = Provider::default();
    let err = refund_call(&store, &fresh_run(), "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect_err("refused");
    assert_eq!(provider.refunds(), 0);
    let err = err.guard().expect("a guard error");
    assert_eq!(err.action_ran(), Some(false));
    let messages = chain(err);
    let all = messages.join(": ");
    assert!(all.contains("`claim` statement"), "{all}");
    assert!(all.contains("SQLSTATE P0001"), "{all}");
    assert!(all.contains("claims are refused today"), "{all}");
    assert_each_cause_once(&messages);
}

async fn an_unreachable_server_prints_each_cause_once() {
    let down = "postgres://postgres@127.0.0.1:1/test";
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::builder(down)
            .connect_lazy()
            .expect("a lazy store"),
    );
    let provider = Provider::default();
    let err = refund_call(&store, &fresh_run(), "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect_err("down");
    let messages = chain(err.guard().expect("a guard error"));
    assert!(messages.len() >= 3, "{messages:?}");
    assert_each_cause_once(&messages);
}

fn main() {
    let mut trials = Suite::new(in_scope)
        .requiring_env(URL)
        .cleaning_up(drop_schema)
        .racing_callers(200)
        .purging_in_batches()
        .counting_statements(PostgresStore::statements)
        .trials();
    trials.push(harness::Trial::test(
        "the_schema_a_dba_applies_by_hand_is_the_one_migrate_applies",
        || {
            the_schema_a_dba_applies_by_hand_is_the_one_migrate_applies();
            Ok(())
        },
    ));
    trials.extend(trials!(URL;
        a_claim_a_completion_a_replay_and_a_wait_take_one_round_trip_each,
        measured_latency_of_a_guarded_call_on_the_local_server,
        racing_claims_from_many_connections_check_tool_and_arguments_on_every_path,
        a_waiter_on_another_connection_is_woken_by_notify_not_by_polling,
        only_a_completion_a_waiter_marked_notifies,
        asynchronous_completions_record_and_replay_like_synchronous_ones,
        a_waiter_outlives_its_listening_connection_being_killed,
        a_store_on_an_applications_pool_without_a_listener_polls_and_still_replays,
        a_missing_schema_says_to_migrate_and_nothing_runs,
        migrating_from_several_processes_at_once_succeeds,
        a_version_1_schema_is_upgraded_in_place_and_keeps_its_records,
        a_schema_newer_than_the_code_is_refused_and_left_unchanged,
        a_schema_missing_is_not_created_by_check_schema,
        a_server_error_names_the_statement_its_sqlstate_and_the_servers_message,
    ));
    trials.extend(trials!(always;
        a_server_that_is_down_is_unavailable_and_nothing_runs,
        an_unreachable_server_prints_each_cause_once,
    ));
    harness::main(trials);
}
