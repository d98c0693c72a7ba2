//! Coalesced claims and completions: each caller in a batch gets its own
//! answer, one caller's input the server refuses fails only that caller,
//! and a caller dropped while its step waits or is on the wire leaves no
//! claim behind.
//!
//! A batch is held on the wire by a row another transaction holds: a claim
//! on a key the test inserted without committing waits for that
//! transaction, and so does a completion of a row the test locked. With one
//! batch on the wire at a time, the steps asked meanwhile queue, and go
//! together once the test lets the row go.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idempotent_tools::PostgresStore;
use idempotent_tools::call::{ConflictReason, Key, ToolId};
use idempotent_tools::records::Records;
use idempotent_tools::store::postgres::tokio_postgres::{Client, NoTls};
use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, RecordValue, Store, StoreError, StoreResult,
};
use idempotent_tools_testing::conformance::kit::{
    CountingProvider, TOOL, claimed, done, fresh_run, refund_call, refund_key, refunds, request,
    usd,
};
use tokio::task::JoinHandle;

use crate::Schema;

const LONG: Duration = Duration::from_secs(3600);

/// A store that puts one batch of a kind on the wire at a time.
async fn one_batch_at_a_time(schema: &Schema) -> Arc<PostgresStore> {
    Arc::new(schema.store_with(|b| b.coalesce_in_flight(1)).await)
}

/// A connection of the test's own in the schema.
async fn side(schema: &Schema) -> Client {
    let (client, connection) = schema.config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// Inserts a held row for `key` in a transaction left open: a claim on the
/// key waits for it. `let_go` rolls it back.
async fn hold_new_key(client: &Client, key: &Key) {
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .execute(
            "INSERT INTO idempotent_claims
                 (key_digest, key_text, tool, fingerprint, state, owner, fence, lease_until,
                  expires_at)
             VALUES ($1, $2, 'other', '\\x00', 'held', '\\x00', 1, now() + interval '1 hour',
                     now() + interval '2 hours')",
            &[&key.digest().as_slice(), &key.as_str()],
        )
        .await
        .expect("insert");
}

/// Locks `key`'s row in a transaction left open: a completion of it waits.
async fn lock_row(client: &Client, key: &Key) {
    client.batch_execute("BEGIN").await.expect("begin");
    let locked = client
        .execute(
            "SELECT 1 FROM idempotent_claims WHERE key_digest = $1 FOR UPDATE",
            &[&key.digest().as_slice()],
        )
        .await
        .expect("lock");
    assert_eq!(locked, 1);
}

async fn let_go(client: &Client) {
    client.batch_execute("ROLLBACK").await.expect("rollback");
}

/// Waits until `n` steps queue behind the batch on the wire.
async fn until_waiting(store: &PostgresStore, n: usize) {
    while store.waiting() < n {
        tokio::task::yield_now().await;
    }
}

/// Waits until the store has sent `n` statements.
async fn until_sent(store: &PostgresStore, n: u64) {
    while store.statements() < n {
        tokio::task::yield_now().await;
    }
}

fn spawn_claim(
    store: &Arc<PostgresStore>,
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
    store: &Arc<PostgresStore>,
    claim: Claim,
    completion: Completion,
) -> JoinHandle<StoreResult<()>> {
    let store = Arc::clone(store);
    tokio::spawn(async move { store.complete(&claim, completion).await })
}

/// A recorded value as JSON text.
fn json(value: &RecordValue) -> String {
    value.to_json().expect("JSON").into_owned()
}

/// The tool of the kit's requests.
fn tool() -> ToolId {
    TOOL.clone()
}

pub(super) async fn each_caller_in_a_coalesced_batch_gets_its_own_answer() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = one_batch_at_a_time(&schema).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (replayed, held) = (key("replayed"), key("held"));
    let first = claimed(&*store, request(&replayed, LONG)).await;
    store.complete(&first, done("7")).await.expect("complete");
    let _holder = claimed(&*store, request(&held, LONG)).await;

    let blocker = key("blocker");
    let client = side(&schema).await;
    hold_new_key(&client, &blocker).await;
    let before = store.statements();
    let on_the_wire = spawn_claim(&store, &blocker, &tool(), 42);
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
    let_go(&client).await;

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
            other => panic!("a fresh key in a batch: {other:?}"),
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
        other => panic!("a replay in a batch: {other:?}"),
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
    let sent = store.statements() - before;
    // 11 claims: the one on the wire, then batches split only by repeated
    // keys (the replayed key is asked three times).
    assert!(sent <= 4, "11 claims took {sent} statements");

    // Completions: one on the wire, then one batch with a repeat (a retry
    // after a lost reply), a fence that is not the row's and an owner that
    // is not the row's.
    let claims: Vec<Claim> = {
        let mut claims = Vec::new();
        for i in 0..5 {
            claims.push(claimed(&*store, request(&key(&format!("done-{i}")), LONG)).await);
        }
        claims
    };
    lock_row(&client, &claims[0].key).await;
    let before = store.statements();
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
    let_go(&client).await;
    let completed = |task: JoinHandle<StoreResult<()>>| async move { task.await.expect("task") };
    completed(on_the_wire).await.expect("the one on the wire");
    completed(right).await.expect("a completion in a batch");
    completed(again).await.expect("the same completion again");
    assert!(matches!(
        completed(wrong_fence).await,
        Err(StoreError::LeaseLost)
    ));
    completed(right_too).await.expect("another in the batch");
    assert!(matches!(
        completed(wrong_owner).await,
        Err(StoreError::LeaseLost)
    ));
    let sent = store.statements() - before;
    assert!(sent <= 3, "6 completions took {sent} statements");
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

pub(super) async fn many_guarded_calls_coalesced_act_once_per_key() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = one_batch_at_a_time(&schema).await;
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

pub(super) async fn a_step_the_server_refuses_fails_only_its_caller() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = one_batch_at_a_time(&schema).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let client = side(&schema).await;

    let blocker = key("blocker");
    hold_new_key(&client, &blocker).await;
    let before = store.statements();
    let on_the_wire = spawn_claim(&store, &blocker, &tool(), 42);
    until_sent(&store, before + 1).await;
    let (a, b, refused) = (key("a"), key("b"), key("refused"));
    let first = spawn_claim(&store, &a, &tool(), 42);
    // Postgres's text holds no NUL: the server refuses this tool's name.
    let bad = spawn_claim(&store, &refused, &ToolId::owned("tests::\0refund"), 42);
    let second = spawn_claim(&store, &b, &tool(), 42);
    until_waiting(&store, 3).await;
    let_go(&client).await;
    let answer =
        |task: JoinHandle<StoreResult<ClaimAnswer>>| async move { task.await.expect("task") };
    let blocked = match answer(on_the_wire).await {
        Ok(ClaimAnswer::Claimed(claim)) => claim,
        other => panic!("the claim on the wire: {other:?}"),
    };
    let first = match answer(first).await {
        Ok(ClaimAnswer::Claimed(claim)) => claim,
        other => panic!("a claim beside a refused one: {other:?}"),
    };
    let refused_answer = answer(bad).await;
    assert!(
        matches!(refused_answer, Err(StoreError::Backend(_))),
        "{refused_answer:?}"
    );
    let second = match answer(second).await {
        Ok(ClaimAnswer::Claimed(claim)) => claim,
        other => panic!("a claim beside a refused one: {other:?}"),
    };
    assert!(store.inspect(&refused).await.expect("inspect").is_none());

    // A completion whose time the server refuses (before 4713 BC).
    let third = claimed(&*store, request(&key("c"), LONG)).await;
    lock_row(&client, &blocker).await;
    let before = store.statements();
    let on_the_wire = spawn_complete(&store, blocked, done("0"));
    until_sent(&store, before + 1).await;
    let ok = spawn_complete(&store, first.clone(), done("1"));
    let mut too_old = done("2");
    too_old.completed_at = SystemTime::UNIX_EPOCH
        .checked_sub(Duration::from_secs(7000 * 366 * 24 * 3600))
        .expect("a time before the epoch");
    let bad = spawn_complete(&store, second.clone(), too_old);
    let ok_too = spawn_complete(&store, third.clone(), done("3"));
    until_waiting(&store, 3).await;
    let_go(&client).await;
    let completed = |task: JoinHandle<StoreResult<()>>| async move { task.await.expect("task") };
    completed(on_the_wire).await.expect("the one on the wire");
    completed(ok)
        .await
        .expect("a completion beside a refused one");
    let refused = completed(bad).await;
    assert!(
        matches!(refused, Err(StoreError::Backend(_))),
        "{refused:?}"
    );
    completed(ok_too)
        .await
        .expect("a completion beside a refused one");
    for (claim, expected) in [(&first, Some("1")), (&second, None), (&third, Some("3"))] {
        let record = store
            .inspect(&claim.key)
            .await
            .expect("inspect")
            .expect("a record");
        assert_eq!(record.result.as_ref().map(json).as_deref(), expected);
    }
}

pub(super) async fn a_caller_dropped_while_queued_or_on_the_wire_leaves_no_claim() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = one_batch_at_a_time(&schema).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (first_row, second_row) = (side(&schema).await, side(&schema).await);
    let (d1, d2, queued, in_batch) = (key("d1"), key("d2"), key("queued"), key("in-batch"));
    hold_new_key(&first_row, &d1).await;
    hold_new_key(&second_row, &d2).await;

    let before = store.statements();
    let first = spawn_claim(&store, &d1, &tool(), 42);
    until_sent(&store, before + 1).await;
    let dropped_queued = spawn_claim(&store, &queued, &tool(), 42);
    let dropped_in_batch = spawn_claim(&store, &in_batch, &tool(), 42);
    let dropped_blocked = spawn_claim(&store, &d2, &tool(), 42);
    until_waiting(&store, 3).await;
    dropped_queued.abort();
    assert!(dropped_queued.await.expect_err("dropped").is_cancelled());

    // The first batch comes back; the next, with `in-batch` and `d2`, goes
    // and waits on d2's row.
    let_go(&first_row).await;
    assert!(matches!(
        first.await.expect("task").expect("claim"),
        ClaimAnswer::Claimed(_)
    ));
    until_sent(&store, before + 2).await;
    dropped_in_batch.abort();
    assert!(dropped_in_batch.await.expect_err("dropped").is_cancelled());
    dropped_blocked.abort();
    assert!(dropped_blocked.await.expect_err("dropped").is_cancelled());
    let_go(&second_row).await;

    // The batch made both claims for callers that were gone: each is
    // released.
    for k in [&in_batch, &d2] {
        while store.inspect(k).await.expect("inspect").is_some() {
            tokio::task::yield_now().await;
        }
    }
    assert!(
        store.inspect(&queued).await.expect("inspect").is_none(),
        "the queued claim never went"
    );
    // And a follow-up with an hour's lease acts at once on each key.
    let shared: Arc<dyn Store> = store.clone();
    let provider = CountingProvider::default();
    for order in ["queued", "in-batch", "d2"] {
        let outcome = refund_call(&shared, &run, order, 42)
            .lease(LONG)
            .wait(Duration::from_secs(5))
            .run(refunds(&provider, 42))
            .await
            .expect("the follow-up");
        assert!(outcome.is_fresh(), "{order}: {outcome:?}");
    }
    assert_eq!(provider.refunds(), 3);
}

pub(super) async fn a_batch_whose_server_is_away_fails_each_caller_once_not_one_by_one() {
    // Port 1 on the loopback: nothing listens there.
    let budget = Duration::from_secs(1);
    let store = Arc::new(
        PostgresStore::builder("postgres://postgres@127.0.0.1:1/test")
            .coalesce_in_flight(1)
            .reconnect_within(budget)
            .connect_lazy()
            .expect("a lazy store"),
    );
    let run = fresh_run();
    let started = std::time::Instant::now();
    let first = spawn_claim(&store, &refund_key(&run, "first"), &tool(), 42);
    let queued: Vec<_> = (0..3)
        .map(|i| {
            spawn_claim(
                &store,
                &refund_key(&run, &format!("queued-{i}")),
                &tool(),
                42,
            )
        })
        .collect();
    until_waiting(&store, 3).await;
    for task in std::iter::once(first).chain(queued) {
        let answer = task.await.expect("task");
        assert!(
            matches!(answer, Err(StoreError::Unavailable(_))),
            "{answer:?}"
        );
    }
    // The first alone, then the three together: two budgets, not five.
    let took = started.elapsed();
    assert!(took < budget * 4, "took {took:?}");
}
