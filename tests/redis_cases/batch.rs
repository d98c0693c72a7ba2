//! Coalesced claims and completions: each caller in a pipeline gets its own
//! answer, one caller's script that fails fails only that caller, and a
//! caller dropped while its step waits or is on the wire leaves no claim
//! behind.
//!
//! A pipeline is held on the wire by a gate: the store talks to the server
//! through a proxy of the test's own that, closed, lets through only the
//! writes it is told to. With one pipeline on the wire at a time, the steps
//! asked meanwhile queue, and go together once the gate opens.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idempotent_tools::RedisStore;
use idempotent_tools::call::{ConflictReason, Key, ToolId};
use idempotent_tools::records::Records;
use idempotent_tools::store::redis::redis;
use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, RecordValue, Store, StoreError, StoreResult,
};
use idempotent_tools_testing::conformance::kit::{
    CountingProvider, TOOL, claimed, done, fresh_run, refund_call, refund_key, refunds, request,
    usd,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::{Prefixed, admin};

const LONG: Duration = Duration::from_secs(3600);

/// A TCP proxy in front of the server whose gate, closed, holds what the
/// store writes until the test lets it through.
struct Gate {
    port: u16,
    closed: Arc<AtomicBool>,
    permits: Arc<Semaphore>,
}

impl Gate {
    async fn start(upstream: String) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let closed = Arc::new(AtomicBool::new(false));
        let permits = Arc::new(Semaphore::new(0));
        let (c, p) = (Arc::clone(&closed), Arc::clone(&permits));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
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
        }
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
async fn gated(place: &Prefixed) -> (Arc<RedisStore>, Gate) {
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
    let store = RedisStore::builder(url.as_str())
        .prefix(place.prefix.as_str())
        .coalesce_in_flight(1)
        .connect()
        .await
        .expect("a store");
    assert!(store.listening().await);
    (Arc::new(store), gate)
}

/// Waits until `n` steps queue behind the pipeline on the wire.
async fn until_waiting(store: &RedisStore, n: usize) {
    while store.waiting() < n {
        tokio::task::yield_now().await;
    }
}

/// Waits until the store has made `n` round trips.
async fn until_sent(store: &RedisStore, n: u64) {
    while store.round_trips() < n {
        tokio::task::yield_now().await;
    }
}

fn spawn_claim(
    store: &Arc<RedisStore>,
    key: &Key,
    tool: &ToolId,
    amount: u64,
) -> JoinHandle<StoreResult<ClaimAnswer>> {
    let (store, key, tool) = (Arc::clone(store), key.clone(), tool.clone());
    tokio::spawn(async move {
        store
            .claim(ClaimRequest {
                key: &key,
                tool: &tool,
                fingerprint: usd(amount),
                lease: LONG,
                retention: LONG,
            })
            .await
    })
}

fn spawn_complete(
    store: &Arc<RedisStore>,
    claim: Claim,
    completion: Completion,
) -> JoinHandle<StoreResult<()>> {
    let store = Arc::clone(store);
    tokio::spawn(async move { store.complete(&claim, completion).await })
}

fn json(value: &RecordValue) -> String {
    value.to_json().expect("JSON").into_owned()
}

fn tool() -> ToolId {
    TOOL.clone()
}

pub async fn each_caller_in_a_coalesced_pipeline_gets_its_own_answer() {
    let Some(place) = Prefixed::new() else { return };
    let (store, gate) = gated(&place).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (replayed, held) = (key("replayed"), key("held"));
    let first = claimed(&*store, request(&replayed, LONG)).await;
    store.complete(&first, done("7")).await.expect("complete");
    let _holder = claimed(&*store, request(&held, LONG)).await;

    gate.close();
    let before = store.round_trips();
    let on_the_wire = spawn_claim(&store, &key("blocker"), &tool(), 42);
    until_sent(&store, before + 1).await;
    let other_tool = ToolId::new("tests::other");
    let fresh: Vec<Key> = (0..4).map(|i| key(&format!("fresh-{i}"))).collect();
    let mut asks = Vec::new();
    for k in &fresh {
        asks.push(spawn_claim(&store, k, &tool(), 42));
    }
    // The second ask for `fresh[0]` queues behind the first: spawned tasks
    // run in no set order, so the first must be waiting before it is asked.
    until_waiting(&store, 4).await;
    let twice = spawn_claim(&store, &fresh[0], &tool(), 42);
    let replay = spawn_claim(&store, &replayed, &tool(), 42);
    let conflict_done = spawn_claim(&store, &replayed, &tool(), 43);
    let conflict_tool = spawn_claim(&store, &replayed, &other_tool, 42);
    let waits = spawn_claim(&store, &held, &tool(), 42);
    let conflict_held = spawn_claim(&store, &held, &tool(), 43);
    until_waiting(&store, 10).await;
    gate.open();

    let answer = |task: JoinHandle<StoreResult<ClaimAnswer>>| async move {
        task.await.expect("task").expect("claim")
    };
    assert!(matches!(answer(on_the_wire).await, ClaimAnswer::Claimed(_)));
    let mut owners = Vec::new();
    for task in asks {
        match answer(task).await {
            ClaimAnswer::Claimed(claim) => {
                assert_eq!(claim.fence, 1);
                owners.push(claim.owner);
            }
            other => panic!("a fresh key in a pipeline: {other:?}"),
        }
    }
    owners.sort_unstable();
    owners.dedup();
    assert_eq!(owners.len(), 4, "each claim has an owner of its own");
    assert!(
        matches!(answer(twice).await, ClaimAnswer::InFlight(_)),
        "the second ask for a key finds the first's claim"
    );
    match answer(replay).await {
        ClaimAnswer::Completed(c) => assert_eq!(json(&c.value), "7"),
        other => panic!("a replay in a pipeline: {other:?}"),
    }
    match answer(conflict_done).await {
        ClaimAnswer::Conflict { reason, first } => {
            assert_eq!(reason, ConflictReason::Arguments);
            assert_eq!(first.as_ref().map(json).as_deref(), Some("7"));
        }
        other => panic!("other arguments on a done key: {other:?}"),
    }
    assert!(matches!(
        answer(conflict_tool).await,
        ClaimAnswer::Conflict {
            reason: ConflictReason::OtherTool,
            first: None
        }
    ));
    assert!(matches!(answer(waits).await, ClaimAnswer::InFlight(_)));
    assert!(matches!(
        answer(conflict_held).await,
        ClaimAnswer::Conflict {
            reason: ConflictReason::Arguments,
            first: None
        }
    ));
    let sent = store.round_trips() - before;
    // 11 claims: the one on the wire, then pipelines split only by
    // repeated keys (the replayed key is asked three times).
    assert!(sent <= 4, "11 claims took {sent} round trips");

    // Completions: one on the wire, then one pipeline with a repeat (a
    // retry after a lost reply), a stale fence and an owner that is not the
    // record's.
    let claims: Vec<Claim> = {
        let mut claims = Vec::new();
        for i in 0..5 {
            claims.push(claimed(&*store, request(&key(&format!("done-{i}")), LONG)).await);
        }
        claims
    };
    gate.close();
    let before = store.round_trips();
    let on_the_wire = spawn_complete(&store, claims[0].clone(), done("0"));
    until_sent(&store, before + 1).await;
    let right = spawn_complete(&store, claims[1].clone(), done("1"));
    let again = spawn_complete(&store, claims[1].clone(), done("1"));
    let wrong_fence = spawn_complete(
        &store,
        Claim {
            fence: claims[2].fence + 1,
            ..claims[2].clone()
        },
        done("2"),
    );
    let right_too = spawn_complete(&store, claims[3].clone(), done("3"));
    let wrong_owner = spawn_complete(
        &store,
        Claim {
            owner: claims[4].owner ^ 1,
            ..claims[4].clone()
        },
        done("4"),
    );
    until_waiting(&store, 5).await;
    gate.open();
    let completed = |task: JoinHandle<StoreResult<()>>| async move { task.await.expect("task") };
    completed(on_the_wire).await.expect("the one on the wire");
    completed(right).await.expect("a completion in a pipeline");
    completed(again)
        .await
        .expect("the same completion again writes the same record");
    assert!(matches!(
        completed(wrong_fence).await,
        Err(StoreError::LeaseLost)
    ));
    completed(right_too).await.expect("another in the pipeline");
    assert!(matches!(
        completed(wrong_owner).await,
        Err(StoreError::LeaseLost)
    ));
    let sent = store.round_trips() - before;
    assert!(sent <= 3, "6 completions took {sent} round trips");
    for (i, expected) in [
        (0, Some("0")),
        (1, Some("1")),
        (2, None),
        (3, Some("3")),
        (4, None),
    ] {
        let record = store
            .inspect(&claims[i].key)
            .await
            .expect("inspect")
            .expect("a record");
        assert_eq!(
            record.result.as_ref().map(json).as_deref(),
            expected,
            "the record of done-{i}"
        );
    }
}

pub async fn many_guarded_calls_coalesced_act_once_per_key() {
    let Some(place) = Prefixed::new() else { return };
    let (store, _gate) = gated(&place).await;
    let store: Arc<dyn Store> = store;
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let start = Arc::new(tokio::sync::Barrier::new(48));
    let mut tasks = Vec::new();
    for i in 0..48 {
        let order = format!("order-{}", i % 8);
        let (store, run, provider, start) = (
            Arc::clone(&store),
            run.clone(),
            Arc::clone(&provider),
            Arc::clone(&start),
        );
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let outcome = refund_call(&store, &run, &order, 42)
                .run(refunds(&provider, 42))
                .await
                .expect("a call");
            (order, outcome.into_value().expect("a value").id)
        }));
    }
    let mut seen = std::collections::HashMap::new();
    for task in tasks {
        let (order, id) = task.await.expect("task");
        let first = seen.entry(order.clone()).or_insert_with(|| id.clone());
        assert_eq!(*first, id, "every caller of {order} sees the one refund");
    }
    assert_eq!(
        provider.refunds(),
        8,
        "one refund per key reached the provider"
    );
    let mut ids: Vec<_> = seen.into_values().collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "each key its own refund");
}

pub async fn a_script_that_fails_for_one_caller_fails_only_that_caller() {
    let Some(place) = Prefixed::new() else { return };
    let (store, gate) = gated(&place).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (a, b, refused) = (key("a"), key("b"), key("refused"));
    // Not a hash: the claim script's `HGET` on it fails, for this key only.
    let _: () = redis::cmd("SET")
        .arg(store.record_key(&refused))
        .arg("not a hash")
        .query_async(&mut admin(&place.url).await)
        .await
        .expect("set");

    gate.close();
    let before = store.round_trips();
    let on_the_wire = spawn_claim(&store, &key("blocker"), &tool(), 42);
    until_sent(&store, before + 1).await;
    let first = spawn_claim(&store, &a, &tool(), 42);
    let bad = spawn_claim(&store, &refused, &tool(), 42);
    let second = spawn_claim(&store, &b, &tool(), 42);
    until_waiting(&store, 3).await;
    gate.open();
    let answer =
        |task: JoinHandle<StoreResult<ClaimAnswer>>| async move { task.await.expect("task") };
    let blocked = match answer(on_the_wire).await {
        Ok(ClaimAnswer::Claimed(claim)) => claim,
        other => panic!("the claim on the wire: {other:?}"),
    };
    let first = match answer(first).await {
        Ok(ClaimAnswer::Claimed(claim)) => claim,
        other => panic!("a claim beside a failing one: {other:?}"),
    };
    let failed = answer(bad).await;
    assert!(matches!(failed, Err(StoreError::Backend(_))), "{failed:?}");
    let second = match answer(second).await {
        Ok(ClaimAnswer::Claimed(claim)) => claim,
        other => panic!("a claim beside a failing one: {other:?}"),
    };
    assert_eq!(
        store.round_trips() - before,
        2,
        "the three went in one pipeline"
    );

    // A completion whose record turned into a string fails alone too.
    let third = claimed(&*store, request(&key("c"), LONG)).await;
    let _: () = redis::cmd("SET")
        .arg(store.record_key(&second.key))
        .arg("not a hash")
        .query_async(&mut admin(&place.url).await)
        .await
        .expect("set");
    gate.close();
    let before = store.round_trips();
    let on_the_wire = spawn_complete(&store, blocked, done("0"));
    until_sent(&store, before + 1).await;
    let ok = spawn_complete(&store, first.clone(), done("1"));
    let bad = spawn_complete(&store, second.clone(), done("2"));
    let ok_too = spawn_complete(&store, third.clone(), done("3"));
    until_waiting(&store, 3).await;
    gate.open();
    let completed = |task: JoinHandle<StoreResult<()>>| async move { task.await.expect("task") };
    completed(on_the_wire).await.expect("the one on the wire");
    completed(ok)
        .await
        .expect("a completion beside a failing one");
    let failed = completed(bad).await;
    assert!(matches!(failed, Err(StoreError::Backend(_))), "{failed:?}");
    completed(ok_too)
        .await
        .expect("a completion beside a failing one");
    for (claim, expected) in [(&first, "1"), (&third, "3")] {
        let record = store
            .inspect(&claim.key)
            .await
            .expect("inspect")
            .expect("a record");
        assert_eq!(record.result.as_ref().map(json).as_deref(), Some(expected));
    }
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
    let (store, gate) = gated(&place).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (alone, queued, in_pipeline, kept) =
        (key("alone"), key("queued"), key("in-pipeline"), key("kept"));

    // Dropped while its claim, alone, is on the wire.
    gate.close();
    let before = store.round_trips();
    let on_the_wire = spawn_claim(&store, &alone, &tool(), 42);
    until_sent(&store, before + 1).await;
    // Dropped while queued behind it: never sent.
    let dropped_queued = spawn_claim(&store, &queued, &tool(), 42);
    until_waiting(&store, 1).await;
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
    until_sent(&store, before + 1).await;
    let dropped = spawn_claim(&store, &in_pipeline, &tool(), 42);
    let waiting = spawn_claim(&store, &kept, &tool(), 42);
    until_waiting(&store, 2).await;
    gate.let_through(1);
    until_sent(&store, before + 2).await;
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
