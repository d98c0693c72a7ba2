//! Steps that wait while a write is in flight go together in the next
//! transaction: each caller still gets its own answer, a failing step fails
//! only its caller, and a caller that leaves leaves no claim behind.
//!
//! Each case holds the file's write lock from a connection of its own
//! while it queues its callers, so they are all waiting when the lock is
//! let go; the store's step counter tells when they are queued.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::SqliteStore;
use idempotent_tools::records::Records;
use idempotent_tools::store::sqlite::rusqlite;
use idempotent_tools::store::{ClaimAnswer, Store, StoreError};
use idempotent_tools_testing::conformance::kit::{
    CountingProvider as Provider, PATIENCE, claimed, done, fresh_run, refund_call, refund_key,
    refunds, request, usd,
};
use tempfile::TempDir;
use tokio::task::JoinHandle;

fn file() -> (TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("idempotent-sqlite-batch-")
        .tempdir()
        .expect("a temporary directory");
    let path = dir.path().join("claims.db");
    (dir, path)
}

/// The file's write lock, held by a connection of the case's own until
/// dropped.
struct WriteLock(rusqlite::Connection);

impl WriteLock {
    fn take(path: &Path) -> WriteLock {
        let conn = rusqlite::Connection::open(path).expect("a second connection");
        conn.execute_batch("BEGIN IMMEDIATE")
            .expect("take the write lock");
        WriteLock(conn)
    }

    fn let_go(self) {
        self.0.execute_batch("ROLLBACK").expect("let the lock go");
    }
}

/// Waits until `store` has been asked for `steps` steps since `before`:
/// the callers are queued.
async fn queued(store: &SqliteStore, before: u64, steps: u64) {
    tokio::time::timeout(PATIENCE, async {
        while store.statements() < before + steps {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the callers were queued in time");
}

async fn finished<T>(task: JoinHandle<T>) -> T {
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the caller answered in time")
        .expect("the caller did not panic")
}

pub async fn callers_queued_behind_a_write_each_get_their_own_answer_and_act_once_per_key() {
    let (_dir, path) = file();
    let sqlite = Arc::new(SqliteStore::open(&path).expect("open"));
    let store: Arc<dyn Store> = sqlite.clone();
    let run = fresh_run();
    let provider = Arc::new(Provider::default());

    // Before the batch: a finished refund (to replay and to conflict
    // with), and a claim taken over from a holder whose lease ran out.
    let first = refund_call(&store, &run, "done", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("a first refund");
    assert!(first.is_fresh());
    let stale_key = refund_key(&run, "stale");
    let stale = claimed(&*store, request(&stale_key, Duration::ZERO)).await;
    let current = claimed(&*store, request(&stale_key, Duration::from_secs(60))).await;
    assert!(current.taken_over && current.fence > stale.fence);

    let lock = WriteLock::take(&path);
    let (before, transactions) = (sqlite.statements(), sqlite.transactions());
    // Two guarded callers on each of eight new orders.
    let calls: Vec<_> = (0..16)
        .map(|i| {
            let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
            tokio::spawn(async move {
                refund_call(&store, &run, &format!("order-{}", i % 8), 42)
                    .run(refunds(&provider, 42))
                    .await
            })
        })
        .collect();
    // A repeat of the finished refund, the same order with another amount,
    // and both holders of the taken-over claim completing.
    let repeat = {
        let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
        tokio::spawn(async move {
            refund_call(&store, &run, "done", 42)
                .run(refunds(&provider, 42))
                .await
        })
    };
    let conflicting = {
        let (store, key) = (store.clone(), refund_key(&run, "done"));
        tokio::spawn(async move {
            let mut other = request(&key, Duration::from_secs(60));
            other.fingerprint = usd(99);
            matches!(store.claim(other).await, Ok(ClaimAnswer::Conflict { .. }))
        })
    };
    let stale_completes = {
        let store = store.clone();
        tokio::spawn(async move { store.complete(&stale, done("\"stale\"")).await })
    };
    let current_completes = {
        let store = store.clone();
        tokio::spawn(async move { store.complete(&current, done("\"current\"")).await })
    };
    queued(&sqlite, before, 20).await;
    lock.let_go();

    let mut fresh = 0;
    for call in calls {
        let outcome = finished(call).await.expect("each caller gets an outcome");
        fresh += usize::from(outcome.is_fresh());
        assert!(outcome.is_fresh() || outcome.is_replay(), "{outcome:?}");
    }
    assert_eq!(fresh, 8, "one caller of each order acted");
    let repeat = finished(repeat).await.expect("the repeat's outcome");
    assert!(repeat.is_replay(), "{repeat:?}");
    assert!(finished(conflicting).await, "another amount is a conflict");
    assert!(
        matches!(finished(stale_completes).await, Err(StoreError::LeaseLost)),
        "the stale holder's fence is refused"
    );
    finished(current_completes)
        .await
        .expect("the current holder completes");
    assert_eq!(provider.refunds(), 1 + 8, "each order refunded once");
    let record = sqlite
        .inspect(&stale_key)
        .await
        .expect("inspect")
        .expect("the record");
    assert_eq!(
        record
            .result
            .map(|r| r.to_json().expect("json").into_owned()),
        Some("\"current\"".to_owned()),
        "the current holder's result is kept"
    );
    // The twenty steps queued behind the lock took far fewer commits than
    // steps (the duplicates' second claims and the completions follow).
    let commits = sqlite.transactions() - transactions;
    let steps = sqlite.statements() - before;
    assert!(commits < steps, "{commits} commits for {steps} steps");
}

pub async fn a_step_the_database_refuses_fails_only_its_own_caller() {
    let (_dir, path) = file();
    let sqlite = Arc::new(SqliteStore::open(&path).expect("open"));
    let store: Arc<dyn Store> = sqlite.clone();
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    rusqlite::Connection::open(&path)
        .expect("a second connection")
        .execute_batch(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON idempotent_claims
             WHEN NEW.key_text LIKE '%poison%'
             BEGIN SELECT RAISE(ABORT, 'this order is refused'); END;",
        )
        .expect("a trigger that refuses one order");

    let lock = WriteLock::take(&path);
    let (before, transactions) = (sqlite.statements(), sqlite.transactions());
    let calls: Vec<_> = ["a", "poison", "b", "c", "d"]
        .into_iter()
        .map(|order| {
            let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
            tokio::spawn(async move {
                let outcome = refund_call(&store, &run, order, 42)
                    .run(refunds(&provider, 42))
                    .await;
                (order, outcome)
            })
        })
        .collect();
    queued(&sqlite, before, 5).await;
    lock.let_go();

    for call in calls {
        let (order, outcome) = finished(call).await;
        if order == "poison" {
            assert!(outcome.is_err(), "the refused order fails: {outcome:?}");
        } else {
            assert!(outcome.expect("the others act").is_fresh(), "{order}");
        }
    }
    assert_eq!(provider.refunds(), 4, "the refused order never acted");
    assert!(
        sqlite.transactions() - transactions < sqlite.statements() - before,
        "the claims shared transactions"
    );
    // The others' records committed despite the refused step beside them.
    for order in ["a", "b", "c", "d"] {
        let again = refund_call(&store, &run, order, 42)
            .run(refunds(&provider, 42))
            .await
            .expect("a repeat");
        assert!(again.is_replay(), "{order}");
    }
    assert_eq!(provider.refunds(), 4);
}

pub async fn claims_whose_callers_left_while_queued_or_while_their_batch_waited_are_not_held() {
    let (_dir, path) = file();
    let sqlite = Arc::new(SqliteStore::open(&path).expect("open"));
    let store: Arc<dyn Store> = sqlite.clone();
    let run = fresh_run();
    let claim = |order: &str| {
        let (store, key) = (store.clone(), refund_key(&run, order));
        tokio::spawn(async move {
            let _ = store.claim(request(&key, Duration::from_secs(60))).await;
        })
    };

    let lock = WriteLock::take(&path);
    let before = sqlite.statements();
    // The writer takes the first claim and waits for the lock with it; the
    // second queues behind.
    let taken = claim("taken");
    queued(&sqlite, before, 1).await;
    let queued_claim = claim("queued");
    queued(&sqlite, before, 2).await;
    for task in [taken, queued_claim] {
        task.abort();
        assert!(
            tokio::time::timeout(PATIENCE, task)
                .await
                .expect("dropped in time")
                .is_err_and(|e| e.is_cancelled()),
            "the caller left before its answer"
        );
    }
    lock.let_go();

    // A claim after them runs after their batch: the writer runs in order.
    let after = refund_key(&run, "after");
    claimed(&*store, request(&after, Duration::from_secs(60))).await;
    for order in ["taken", "queued"] {
        let key = refund_key(&run, order);
        let left = sqlite.inspect(&key).await.expect("inspect");
        assert!(left.is_none(), "{order}: no claim is left: {left:?}");
        let again = claimed(&*store, request(&key, Duration::from_secs(60))).await;
        assert!(
            !again.taken_over,
            "{order}: claimed at once, not taken over"
        );
    }
}
