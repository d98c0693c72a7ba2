//! The SQLite store: the whole adversarial suite, the store's own promises
//! (one statement per step, leases and fences, purging, a locked file), and
//! several OS processes on one file.
#![cfg(feature = "sqlite")]

mod adversarial;
mod multiprocess;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use adversarial::{PayError, Provider, fresh_run, refund_call, refund_key, usd};
use idempotent::store::SqliteStore;
use idempotent::store::sqlite::rusqlite;
use idempotent::{
    Call, Claim, ClaimRequest, ClaimState, Ending, Error, Finished, Key, Recorded, Store,
    StoreError, StoreFuture, StoreResult, ToolId,
};
use multiprocess::{FileProvider, LEASE_MS, PROVIDER, Proc, RUN, final_word};
use tempfile::TempDir;

/// A store that owns its directory, removed after the store is closed.
struct InDir {
    store: SqliteStore,
    _dir: TempDir,
}

impl Store for InDir {
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

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("idempotent-sqlite-")
        .tempdir()
        .expect("a temporary directory")
}

async fn sqlite() -> Option<Arc<dyn Store>> {
    let dir = temp_dir();
    let store = SqliteStore::open(dir.path().join("claims.db")).expect("open the store");
    Some(Arc::new(InDir { store, _dir: dir }))
}

adversarial_suite!(sqlite(), callers = 200);

fn open(dir: &TempDir) -> SqliteStore {
    SqliteStore::open(dir.path().join("claims.db")).expect("open the store")
}

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

async fn claimed(store: &SqliteStore, req: ClaimRequest<'_>) -> Claim {
    match store.claim(req).await.expect("claim") {
        ClaimState::Claimed(claim) => claim,
        other => panic!("expected to hold the claim, got {other:?}"),
    }
}

#[tokio::test]
async fn a_fresh_claim_a_completion_and_a_replay_take_one_statement_each() {
    let dir = temp_dir();
    let store = open(&dir);
    let key = refund_key(&fresh_run(), "1182");

    let before = store.statements();
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    assert_eq!(store.statements() - before, 1, "a fresh claim");

    let before = store.statements();
    store
        .complete(&claim, finished(r#"{"id":"re_1"}"#))
        .await
        .expect("complete");
    assert_eq!(store.statements() - before, 1, "a completion");

    let before = store.statements();
    let replay = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(replay, ClaimState::Completed(_)), "{replay:?}");
    assert_eq!(store.statements() - before, 1, "a replay");

    let other = refund_key(&fresh_run(), "1183");
    let claim = claimed(&store, request(&other, Duration::from_secs(30))).await;
    let before = store.statements();
    let in_flight = store
        .claim(request(&other, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(in_flight, ClaimState::InFlight(_)));
    assert_eq!(
        store.statements() - before,
        1,
        "a claim that finds one in flight"
    );
    let before = store.statements();
    store.release(&claim).await.expect("release");
    assert_eq!(store.statements() - before, 1, "a release");
}

#[tokio::test]
async fn a_claim_past_its_lease_is_taken_over_with_a_higher_fence_and_the_stale_holder_changes_nothing()
 {
    let dir = temp_dir();
    let store = open(&dir);
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

#[tokio::test]
async fn extending_a_lease_keeps_the_claim_from_being_taken_over() {
    let dir = temp_dir();
    let store = open(&dir);
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
    assert!(
        matches!(other, ClaimState::InFlight(_)),
        "an extended claim must still be held: {other:?}"
    );
    store
        .complete(&holder, finished("1"))
        .await
        .expect("the holder completes");
}

#[tokio::test]
async fn leases_are_renewed_every_third_of_a_lease() {
    let dir = temp_dir();
    let store = open(&dir);
    assert_eq!(
        store.renew_every(Duration::from_secs(30)),
        Some(Duration::from_secs(10))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_guard_renews_the_lease_while_a_long_action_runs() {
    let dir = temp_dir();
    let store: Arc<dyn Store> = Arc::new(open(&dir));
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

#[tokio::test]
async fn a_replay_is_byte_identical_to_the_recorded_json() {
    let dir = temp_dir();
    let store = open(&dir);
    let key = refund_key(&fresh_run(), "1182");
    // Spacing, key order, escapes and number forms that a parse and
    // re-serialisation would change.
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

#[tokio::test]
async fn a_key_of_a_hundred_kilobytes_is_claimed_and_replayed() {
    let dir = temp_dir();
    let store: Arc<dyn Store> = Arc::new(open(&dir));
    let run = fresh_run();
    let long = "k".repeat(100 * 1024);
    let key = Key::builder()
        .part("run", &run)
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

#[tokio::test]
async fn a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records() {
    let dir = temp_dir();
    let store = SqliteStore::builder(dir.path().join("claims.db"))
        .purge_batch(10)
        .open()
        .expect("open");
    let run = fresh_run();
    let expired = |order: u32| refund_key(&run, &order.to_string());
    for order in 0..25 {
        let key = expired(order);
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
    let dir = temp_dir();
    let store: Arc<dyn Store> = Arc::new(open(&dir));
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
    assert_eq!(provider.refunds(), orders);
    // Every record has expired: each key acts exactly once more, however the
    // purges and the duplicates interleave.
    let purger = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut purged = 0;
            for _ in 0..20 {
                purged += store.purge_expired().await.expect("purge");
                tokio::task::yield_now().await;
            }
            purged
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

#[tokio::test]
async fn a_database_locked_past_the_busy_timeout_is_unavailable_and_nothing_runs() {
    let dir = temp_dir();
    let path = dir.path().join("claims.db");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::builder(&path)
            .busy_timeout(Duration::from_millis(50))
            .open()
            .expect("open"),
    );
    let run = fresh_run();
    let provider = Provider::default();

    let locker = rusqlite::Connection::open(&path).expect("a second connection");
    locker
        .execute_batch("BEGIN EXCLUSIVE")
        .expect("take the write lock");
    let refused = refund_call(&store, &run, "1182", 42)
        .run(async { Ok::<_, PayError>(provider.refund("1182", 42)) })
        .await;
    match &refused {
        Err(err) => assert!(
            matches!(err.guard(), Some(Error::Store(StoreError::Unavailable(_)))),
            "{err:?}"
        ),
        Ok(outcome) => panic!("the action ran on a locked store: {outcome:?}"),
    }
    assert_eq!(provider.refunds(), 0, "no action may run without a claim");
    locker.execute_batch("ROLLBACK").expect("release the lock");

    let retry = refund_call(&store, &run, "1182", 42)
        .run(async { Ok::<_, PayError>(provider.refund("1182", 42)) })
        .await
        .expect("retry");
    assert!(
        retry.is_fresh(),
        "nothing was recorded while the store was down"
    );
}

#[test]
fn a_file_that_cannot_be_opened_is_a_typed_error() {
    let dir = temp_dir();
    let missing = dir.path().join("no-such-directory").join("claims.db");
    let opened = SqliteStore::open(missing);
    assert!(
        matches!(opened, Err(StoreError::Unavailable(_))),
        "{opened:?}"
    );
}

#[tokio::test]
async fn forgetting_removes_a_finished_record_but_never_a_held_claim() {
    let dir = temp_dir();
    let store = open(&dir);
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

// Several processes on one file.

const ENTRY: &str = "child_process";

/// Not a test of its own: the entry point of the child processes that the
/// tests below start. In a normal run it returns at once.
#[test]
fn child_process() {
    let Some(role) = multiprocess::role() else {
        return;
    };
    let path = std::env::var("IDEMPOTENT_TEST_SQLITE").expect("the database path");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(path).expect("open"));
        multiprocess::play(&role, store).await;
    });
}

struct Scene {
    dir: TempDir,
    run: String,
}

impl Scene {
    fn new() -> Scene {
        Scene {
            dir: temp_dir(),
            run: fresh_run().to_string(),
        }
    }

    fn provider(&self) -> std::path::PathBuf {
        self.dir.path().join("provider.log")
    }

    fn spawn(&self, role: &str, lease: Option<Duration>) -> Proc {
        let mut env = vec![
            (
                "IDEMPOTENT_TEST_SQLITE",
                self.dir.path().join("claims.db").display().to_string(),
            ),
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

    /// Opens the same file in this process, as an operator would.
    fn store(&self) -> SqliteStore {
        SqliteStore::open(self.dir.path().join("claims.db")).expect("open")
    }
}

#[test]
fn six_processes_opening_a_new_file_and_refunding_the_same_order_at_once_refund_it_once() {
    let scene = Scene::new();
    // No file yet: the six processes create it (and its schema) together.
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

#[test]
fn a_holder_killed_mid_action_is_taken_over_once_after_its_lease() {
    let scene = Scene::new();
    drop(scene.store());
    let lease = Duration::from_millis(1000);
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
        if let Some(at) = report.acted_at {
            acted_at.push(at);
        }
        fresh += usize::from(report.fresh());
    }
    for proc in procs {
        proc.finish();
    }
    assert_eq!(fresh, 1, "exactly one process takes the claim over");
    assert_eq!(acted_at.len(), 1);
    assert_eq!(
        scene.refunds(),
        1,
        "the killed holder never reached the provider"
    );
    // The holder renewed every third of its lease, so its lease ran at least
    // two thirds of a lease past the kill.
    let earliest = killed_at + lease.as_millis() * 2 / 3;
    assert!(
        acted_at[0] + 50 >= earliest,
        "taken over {} ms after the kill, before the lease ran out",
        acted_at[0].saturating_sub(killed_at)
    );
}

#[test]
fn after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so() {
    let scene = Scene::new();
    drop(scene.store());
    let lease = Duration::from_millis(300);
    let mut holder = scene.spawn("hold", Some(lease));
    holder.expect("acting");
    holder.kill_9();
    let mut unknown = scene.spawn("unknown", Some(lease));
    assert_eq!(
        final_word(&mut unknown),
        Err("unknown-outcome".to_owned()),
        "the takeover must not run the action"
    );
    unknown.finish();
    let mut later = scene.spawn("takeover", Some(lease));
    assert_eq!(final_word(&mut later), Err("unknown-outcome".to_owned()));
    later.finish();
    assert_eq!(scene.refunds(), 0);
}

#[test]
fn a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result() {
    let scene = Scene::new();
    drop(scene.store());
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
    assert_eq!(
        final_word(&mut after),
        Ok((false, value)),
        "the takeover's result stands"
    );
    after.finish();
    assert_eq!(scene.refunds(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn measured_latency_of_a_guarded_call_on_a_local_file() {
    let dir = temp_dir();
    let store: Arc<dyn Store> = Arc::new(open(&dir));
    let run = fresh_run();
    let n = 200u32;
    let started = std::time::Instant::now();
    for order in 0..n {
        refund_call(&store, &run, &order.to_string(), 42)
            .run(async { Ok::<_, PayError>(order) })
            .await
            .expect("fresh");
    }
    let fresh = started.elapsed() / n;
    let started = std::time::Instant::now();
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
