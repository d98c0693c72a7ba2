//! Coalesced claims and completions on Redis: the shared cases of
//! `coalesced`, then what a caller dropped while its step waits or is on the
//! wire leaves (no claim).
//!
//! A pipeline is held on the wire by a gate: the store talks to the server
//! through a proxy of the test's own that, closed, lets through only the
//! writes it is told to.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idempotent_tools::RedisStore;
use idempotent_tools::call::{Key, ToolId};
use idempotent_tools::records::Records;
use idempotent_tools::store::redis::RedisStoreBuilder;
use idempotent_tools::store::redis::redis;
use idempotent_tools::store::{Claim, ClaimAnswer, Completion, Store};
use idempotent_tools_testing::conformance::kit::{done, fresh_run, refund_key};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::coalesced::{self, BatchCounts, Wire, spawn_claim, tool, until_sent, until_waiting};
use crate::{Prefixed, admin};

/// A TCP proxy in front of the server whose gate, closed, holds what the
/// store writes until the test lets it through.
struct Gate {
    port: u16,
    closed: Arc<AtomicBool>,
    permits: Arc<Semaphore>,
    cut: Arc<AtomicBool>,
}

impl Gate {
    async fn start(upstream: String) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let closed = Arc::new(AtomicBool::new(false));
        let permits = Arc::new(Semaphore::new(0));
        let cut = Arc::new(AtomicBool::new(false));
        let (c, p, refusing) = (Arc::clone(&closed), Arc::clone(&permits), Arc::clone(&cut));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if refusing.load(Ordering::SeqCst) {
                    continue;
                }
                let server = TcpStream::connect(upstream.as_str())
                    .await
                    .expect("the server");
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                });
                let (closed, permits) = (Arc::clone(&c), Arc::clone(&p));
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 1 << 16];
                    loop {
                        let n = match from_client.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if closed.load(Ordering::SeqCst) {
                            match permits.acquire().await {
                                Ok(permit) => permit.forget(),
                                Err(_) => return,
                            }
                        }
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Gate {
            port,
            closed,
            permits,
            cut,
        }
    }

    /// Breaks every connection through the gate, the held writes' first,
    /// and refuses new ones: the server is away from then on.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.closed.store(true, Ordering::SeqCst);
        self.permits.close();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // What an earlier opening let through is spent.
        self.permits
            .forget_permits(self.permits.available_permits());
    }

    /// Lets `writes` of the held writes through.
    fn let_through(&self, writes: usize) {
        self.permits.add_permits(writes);
    }

    fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
        self.permits.add_permits(1 << 20);
    }
}

/// A store through a gate, with one pipeline on the wire at a time.
async fn gated(place: &Prefixed) -> Gated {
    gated_with(place, |builder| builder).await
}

/// [`gated`], with more of the builder's options.
async fn gated_with(
    place: &Prefixed,
    options: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
) -> Gated {
    let info = redis::parse_redis_url(&place.url).expect("a Redis URL");
    let upstream = format!(
        "{}:{}",
        info.host_str().expect("a host"),
        info.port().unwrap_or(6379)
    );
    let gate = Gate::start(upstream).await;
    let mut url = info.clone();
    url.set_host(Some("127.0.0.1")).expect("host");
    url.set_port(Some(gate.port)).expect("port");
    let store = options(RedisStore::builder(url.as_str()))
        .prefix(place.prefix.as_str())
        .coalesce_in_flight(1)
        .connect()
        .await
        .expect("a store");
    assert!(store.listening().await);
    Gated {
        store: Arc::new(store),
        gate,
        url: place.url.clone(),
    }
}

/// A store through a gate, and where its keys live.
struct Gated {
    store: Arc<RedisStore>,
    gate: Gate,
    url: String,
}

impl Gated {
    /// Sets `key`'s record to a plain string: a script's `HGET` on it
    /// fails, for this key only.
    async fn spoil(&self, key: &Key) {
        let _: () = redis::cmd("SET")
            .arg(self.store.record_key(key))
            .arg("not a hash")
            .query_async(&mut admin(&self.url).await)
            .await
            .expect("set");
    }
}

impl Wire for Gated {
    type Store = RedisStore;

    fn store(&self) -> &Arc<RedisStore> {
        &self.store
    }

    async fn hold_claim(&self, _: &Key) {
        self.gate.close();
    }

    async fn hold_completion(&self, _: &Claim) {
        self.gate.close();
    }

    async fn let_go(&self) {
        self.gate.open();
    }

    async fn refuse_claim(&self, key: &Key) -> ToolId {
        self.spoil(key).await;
        tool()
    }

    async fn refuse_completion(&self, claim: &Claim) -> Completion {
        self.spoil(&claim.key).await;
        done("2")
    }
}

impl BatchCounts for RedisStore {
    fn sent(&self) -> u64 {
        self.round_trips()
    }

    fn waiting(&self) -> usize {
        RedisStore::waiting(self)
    }
}

pub async fn each_caller_in_a_coalesced_pipeline_gets_its_own_answer() {
    let Some(place) = Prefixed::new() else { return };
    coalesced::each_caller_in_a_batch_gets_its_own_answer(&gated(&place).await).await;
}

pub async fn many_guarded_calls_coalesced_act_once_per_key() {
    let Some(place) = Prefixed::new() else { return };
    coalesced::many_guarded_calls_act_once_per_key(gated(&place).await.store).await;
}

pub async fn a_script_that_fails_for_one_caller_fails_only_that_caller() {
    let Some(place) = Prefixed::new() else { return };
    let failed = coalesced::a_step_that_fails_fails_only_its_caller(&gated(&place).await).await;
    assert_eq!(failed.claims_sent, 2, "the three went in one pipeline");
}

/// Waits until `key` has no record: the claim made for a dropped caller
/// was released.
async fn until_released(store: &RedisStore, key: &Key) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while store.inspect(key).await.expect("inspect").is_some() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the claim of a dropped caller is released at once, not at its lease's end");
}

pub async fn a_caller_dropped_while_queued_or_on_the_wire_leaves_no_claim() {
    let Some(place) = Prefixed::new() else { return };
    let Gated { store, gate, .. } = gated(&place).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (alone, queued, in_pipeline, kept) =
        (key("alone"), key("queued"), key("in-pipeline"), key("kept"));

    // Dropped while its claim, alone, is on the wire.
    gate.close();
    let before = store.round_trips();
    let on_the_wire = spawn_claim(&store, &alone, &tool(), 42);
    until_sent(&*store, before + 1).await;
    // Dropped while queued behind it: never sent.
    let dropped_queued = spawn_claim(&store, &queued, &tool(), 42);
    until_waiting(&*store, 1).await;
    on_the_wire.abort();
    dropped_queued.abort();
    assert!(dropped_queued.await.is_err_and(|e| e.is_cancelled()));
    assert!(on_the_wire.await.is_err_and(|e| e.is_cancelled()));
    gate.open();
    until_released(&store, &alone).await;
    assert!(store.inspect(&queued).await.expect("inspect").is_none());

    // Dropped while its claim is in a pipeline on the wire: the gate lets
    // the claim ahead through, and holds the pipeline behind it.
    gate.close();
    let before = store.round_trips();
    let ahead = spawn_claim(&store, &key("ahead"), &tool(), 42);
    until_sent(&*store, before + 1).await;
    let dropped = spawn_claim(&store, &in_pipeline, &tool(), 42);
    let waiting = spawn_claim(&store, &kept, &tool(), 42);
    until_waiting(&*store, 2).await;
    gate.let_through(1);
    until_sent(&*store, before + 2).await;
    dropped.abort();
    assert!(dropped.await.is_err_and(|e| e.is_cancelled()));
    gate.open();
    assert!(matches!(
        ahead.await.expect("task").expect("claim"),
        ClaimAnswer::Claimed(_)
    ));
    let kept_claim = match waiting.await.expect("task").expect("claim") {
        ClaimAnswer::Claimed(claim) => claim,
        other => panic!("the caller that stayed: {other:?}"),
    };
    until_released(&store, &in_pipeline).await;
    // The caller that stayed keeps its claim.
    store
        .complete(&kept_claim, done("1"))
        .await
        .expect("the kept claim completes");
}

pub async fn a_pipeline_whose_connection_breaks_goes_again_together_not_one_by_one() {
    let Some(place) = Prefixed::new() else { return };
    let budget = Duration::from_secs(1);
    let Gated { store, gate, .. } =
        gated_with(&place, |builder| builder.reconnect_within(budget)).await;
    let run = fresh_run();
    gate.close();
    let before = store.round_trips();
    let first = spawn_claim(&store, &refund_key(&run, "first"), &tool(), 42);
    until_sent(&*store, before + 1).await;
    let queued = coalesced::spawn_queued(&store, &run, 5);
    until_waiting(&*store, 5).await;

    let started = std::time::Instant::now();
    gate.cut();
    coalesced::each_unavailable(std::iter::once(first).chain(queued)).await;
    // The first alone, then the five of the pipeline again together: two
    // budgets, not six.
    let took = started.elapsed();
    assert!(took < budget * 4, "took {took:?}");
}
