//! Coalesced claims and completions, for every store that coalesces across
//! hosts: each caller in a batch gets its own answer, one caller's step that
//! fails fails only that caller, and many guarded calls on few keys act once
//! a key.
//!
//! A store's cases hold one batch on the wire by a means of their own (a
//! row another transaction holds, a proxy that holds the bytes): the
//! [`Wire`]. With one batch of a kind on the wire at a time, the steps asked
//! meanwhile queue, and go together once the wire lets go.

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::call::{ConflictReason, Key, ToolId};
use idempotent_tools::records::Records;
use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, RecordValue, Store, StoreError, StoreResult,
};
use idempotent_tools_testing::conformance::kit::{
    CountingProvider, TOOL, claimed, done, fresh_run, refund_call, refund_key, refunds, request,
    usd,
};
use tokio::task::JoinHandle;

/// A lease and a retention no case outlives.
pub const LONG: Duration = Duration::from_secs(3600);

/// What a coalescing store counts of its batches.
pub trait BatchCounts {
    /// How many batches the store has sent (statements, round trips).
    fn sent(&self) -> u64;

    /// How many steps queue behind the batches on the wire.
    fn waiting(&self) -> usize;
}

/// How a store's cases hold a batch on the wire.
pub trait Wire {
    /// The store, built to put one batch of a kind on the wire at a time.
    type Store: Store + Records + BatchCounts + 'static;

    /// The store under test.
    fn store(&self) -> &Arc<Self::Store>;

    /// Holds the next claim of `key` on the wire until [`Wire::let_go`].
    async fn hold_claim(&self, key: &Key);

    /// Holds the next completion of `claim` on the wire until
    /// [`Wire::let_go`].
    async fn hold_completion(&self, claim: &Claim);

    /// Lets what is held go.
    async fn let_go(&self);

    /// Makes a claim of `key` fail for this key alone; the tool to ask with.
    async fn refuse_claim(&self, key: &Key) -> ToolId;

    /// Makes the completion of `claim` fail for this claim alone; the
    /// completion to ask with.
    async fn refuse_completion(&self, claim: &Claim) -> Completion;
}

/// Waits until `n` steps queue behind the batch on the wire.
pub async fn until_waiting(store: &impl BatchCounts, n: usize) {
    while store.waiting() < n {
        tokio::task::yield_now().await;
    }
}

/// Waits until the store has sent `n` batches.
pub async fn until_sent(store: &impl BatchCounts, n: u64) {
    while store.sent() < n {
        tokio::task::yield_now().await;
    }
}

/// Claims `key` for `amount` on a task of its own.
pub fn spawn_claim<S: Store + 'static>(
    store: &Arc<S>,
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

/// Completes `claim` on a task of its own.
pub fn spawn_complete<S: Store + 'static>(
    store: &Arc<S>,
    claim: Claim,
    completion: Completion,
) -> JoinHandle<StoreResult<()>> {
    let store = Arc::clone(store);
    tokio::spawn(async move { store.complete(&claim, completion).await })
}

/// A recorded value as JSON text.
pub fn json(value: &RecordValue) -> String {
    value.to_json().expect("JSON").into_owned()
}

/// The tool of the kit's requests.
pub fn tool() -> ToolId {
    TOOL.clone()
}

/// Claims `queued-0` to `queued-{n-1}` of `run`, each on a task of its own.
pub fn spawn_queued<S: Store + 'static>(
    store: &Arc<S>,
    run: &idempotent_tools::Run,
    n: usize,
) -> Vec<JoinHandle<StoreResult<ClaimAnswer>>> {
    (0..n)
        .map(|i| spawn_claim(store, &refund_key(run, &format!("queued-{i}")), &tool(), 42))
        .collect()
}

/// Waits for each claim, which must find the store unavailable.
pub async fn each_unavailable(
    tasks: impl IntoIterator<Item = JoinHandle<StoreResult<ClaimAnswer>>>,
) {
    for task in tasks {
        let answer = task.await.expect("task");
        assert!(
            matches!(answer, Err(StoreError::Unavailable(_))),
            "{answer:?}"
        );
    }
}

/// What a spawned claim came to.
async fn claim_answer(task: JoinHandle<StoreResult<ClaimAnswer>>) -> StoreResult<ClaimAnswer> {
    task.await.expect("the claim's task")
}

/// What a spawned completion came to.
async fn completion_answer(task: JoinHandle<StoreResult<()>>) -> StoreResult<()> {
    task.await.expect("the completion's task")
}

/// The claim a spawned claim made.
async fn made(task: JoinHandle<StoreResult<ClaimAnswer>>, what: &str) -> Claim {
    match claim_answer(task).await {
        Ok(ClaimAnswer::Claimed(claim)) => claim,
        other => panic!("{what}: {other:?}"),
    }
}

/// Eleven claims of every kind, then six completions of every kind, each
/// in a batch behind one on the wire: each caller gets its own answer, and
/// the batches are few.
pub async fn each_caller_in_a_batch_gets_its_own_answer(wire: &impl Wire) {
    let store = wire.store();
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (replayed, held) = (key("replayed"), key("held"));
    let first = claimed(&**store, request(&replayed, LONG)).await;
    store.complete(&first, done("7")).await.expect("complete");
    let _holder = claimed(&**store, request(&held, LONG)).await;

    let blocker = key("blocker");
    wire.hold_claim(&blocker).await;
    let before = store.sent();
    let on_the_wire = spawn_claim(store, &blocker, &tool(), 42);
    until_sent(&**store, before + 1).await;
    let other_tool = ToolId::new("tests::other");
    let fresh: Vec<Key> = (0..4).map(|i| key(&format!("fresh-{i}"))).collect();
    let mut asks = Vec::new();
    for k in &fresh {
        asks.push(spawn_claim(store, k, &tool(), 42));
    }
    // The second ask for `fresh[0]` queues behind the first: spawned tasks
    // run in no set order, so the first must be waiting before it is asked.
    until_waiting(&**store, 4).await;
    let twice = spawn_claim(store, &fresh[0], &tool(), 42);
    let replay = spawn_claim(store, &replayed, &tool(), 42);
    let conflict_done = spawn_claim(store, &replayed, &tool(), 43);
    let conflict_tool = spawn_claim(store, &replayed, &other_tool, 42);
    let waits = spawn_claim(store, &held, &tool(), 42);
    let conflict_held = spawn_claim(store, &held, &tool(), 43);
    until_waiting(&**store, 10).await;
    wire.let_go().await;

    let answer = |task| async move { claim_answer(task).await.expect("claim") };
    assert!(matches!(answer(on_the_wire).await, ClaimAnswer::Claimed(_)));
    let mut owners = Vec::new();
    for task in asks {
        let claim = made(task, "a fresh key in a batch").await;
        assert_eq!(claim.fence, 1);
        owners.push(claim.owner);
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
    let sent = store.sent() - before;
    // 11 claims: the one on the wire, then batches split only by repeated
    // keys (the replayed key is asked three times).
    assert!(sent <= 4, "11 claims took {sent} batches");

    // Completions: one on the wire, then one batch with a repeat (a retry
    // after a lost reply), a fence that is not the record's and an owner
    // that is not the record's.
    let mut claims = Vec::new();
    for i in 0..5 {
        claims.push(claimed(&**store, request(&key(&format!("done-{i}")), LONG)).await);
    }
    wire.hold_completion(&claims[0]).await;
    let before = store.sent();
    let on_the_wire = spawn_complete(store, claims[0].clone(), done("0"));
    until_sent(&**store, before + 1).await;
    let right = spawn_complete(store, claims[1].clone(), done("1"));
    let again = spawn_complete(store, claims[1].clone(), done("1"));
    let wrong_fence = spawn_complete(
        store,
        Claim {
            fence: claims[2].fence + 1,
            ..claims[2].clone()
        },
        done("2"),
    );
    let right_too = spawn_complete(store, claims[3].clone(), done("3"));
    let wrong_owner = spawn_complete(
        store,
        Claim {
            owner: claims[4].owner ^ 1,
            ..claims[4].clone()
        },
        done("4"),
    );
    until_waiting(&**store, 5).await;
    wire.let_go().await;
    completion_answer(on_the_wire)
        .await
        .expect("the one on the wire");
    completion_answer(right)
        .await
        .expect("a completion in a batch");
    completion_answer(again)
        .await
        .expect("the same completion again writes the same record");
    assert!(matches!(
        completion_answer(wrong_fence).await,
        Err(StoreError::LeaseLost)
    ));
    completion_answer(right_too)
        .await
        .expect("another in the batch");
    assert!(matches!(
        completion_answer(wrong_owner).await,
        Err(StoreError::LeaseLost)
    ));
    let sent = store.sent() - before;
    assert!(sent <= 3, "6 completions took {sent} batches");
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

/// What [`a_step_that_fails_fails_only_its_caller`] leaves for a store's
/// own checks.
#[allow(dead_code, reason = "each store reads what it can check")]
pub struct Failed {
    /// The key whose claim failed.
    pub claim_of: Key,
    /// The claim whose completion failed.
    pub completion_of: Claim,
    /// How many batches the three claims took.
    pub claims_sent: u64,
}

/// A claim and a completion that fail for their own key, each in a batch
/// between two that succeed: each fails alone.
pub async fn a_step_that_fails_fails_only_its_caller(wire: &impl Wire) -> Failed {
    let store = wire.store();
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (a, b, refused) = (key("a"), key("b"), key("refused"));
    let refused_tool = wire.refuse_claim(&refused).await;

    let blocker = key("blocker");
    wire.hold_claim(&blocker).await;
    let before = store.sent();
    let on_the_wire = spawn_claim(store, &blocker, &tool(), 42);
    until_sent(&**store, before + 1).await;
    let first = spawn_claim(store, &a, &tool(), 42);
    let bad = spawn_claim(store, &refused, &refused_tool, 42);
    let second = spawn_claim(store, &b, &tool(), 42);
    until_waiting(&**store, 3).await;
    wire.let_go().await;
    let blocked = made(on_the_wire, "the claim on the wire").await;
    let first = made(first, "a claim beside a failing one").await;
    let failed = claim_answer(bad).await;
    assert!(matches!(failed, Err(StoreError::Backend(_))), "{failed:?}");
    let second = made(second, "a claim beside a failing one").await;
    let claims_sent = store.sent() - before;

    let third = claimed(&**store, request(&key("c"), LONG)).await;
    let refused_completion = wire.refuse_completion(&second).await;
    wire.hold_completion(&blocked).await;
    let before = store.sent();
    let on_the_wire = spawn_complete(store, blocked, done("0"));
    until_sent(&**store, before + 1).await;
    let ok = spawn_complete(store, first.clone(), done("1"));
    let bad = spawn_complete(store, second.clone(), refused_completion);
    let ok_too = spawn_complete(store, third.clone(), done("3"));
    until_waiting(&**store, 3).await;
    wire.let_go().await;
    completion_answer(on_the_wire)
        .await
        .expect("the one on the wire");
    completion_answer(ok)
        .await
        .expect("a completion beside a failing one");
    let failed = completion_answer(bad).await;
    assert!(matches!(failed, Err(StoreError::Backend(_))), "{failed:?}");
    completion_answer(ok_too)
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
    Failed {
        claim_of: refused,
        completion_of: second,
        claims_sent,
    }
}

/// 48 guarded calls on 8 keys, started together: 8 refunds reach the
/// provider, and every caller of a key sees its one refund.
pub async fn many_guarded_calls_act_once_per_key(store: Arc<dyn Store>) {
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
