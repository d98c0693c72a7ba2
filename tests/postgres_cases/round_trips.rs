//! Round trips counted on the wire: a proxy in front of the server counts
//! the messages that end one, and each step of a claim's life takes one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idempotent_tools::store::postgres::tokio_postgres::{self, Config, NoTls};
use idempotent_tools::store::postgres::{PostgresStoreBuilder, deadpool_postgres};
use idempotent_tools::store::{ClaimAnswer, ClaimRequest, Store};
use idempotent_tools_testing::conformance::kit::{
    claimed, done, fresh_run, refund_key, request, usd,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Schema;

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

/// The server's address, as the config names it.
pub(super) fn upstream(config: &Config) -> SocketAddr {
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

pub(super) async fn a_claim_a_completion_a_replay_and_a_wait_take_one_round_trip_each() {
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
    store.complete(&claim, done("0")).await.expect("complete");
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
    store.complete(&claim, done("1")).await.expect("complete");
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
