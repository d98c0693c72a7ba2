//! Calls in the action's own transaction (`Call::run_in_transaction`) on a
//! SQLite file: the effect is a row in an application table in the store's
//! own file, and each case counts those rows.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use idempotent_tools::call::{Call, Key};
use idempotent_tools::store::StoreError;
use idempotent_tools::store::sqlite::rusqlite;
use idempotent_tools::{Error, Outcome, SqliteStore};
use idempotent_tools_testing::conformance::kit::unique_id;
use tempfile::TempDir;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// The environment variable that makes the test binary a child that writes
/// in its transaction and then waits to be killed, on the file it names.
pub const CHILD_FILE: &str = "IDEMPOTENT_SQLITE_TXN_CHILD_FILE";
const CHILD_KEY: &str = "IDEMPOTENT_SQLITE_TXN_CHILD_KEY";

/// The line a child prints once its write is in its transaction, not yet
/// committed.
const WRITTEN: &str = "written";

/// The lease of the child's claim: how long the retry waits once the child
/// is killed.
const CHILD_LEASE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
enum CreditError {
    #[error(transparent)]
    Idempotency(#[from] Error),
    #[error("the credit could not be written")]
    Database(#[from] rusqlite::Error),
    #[error("the ledger refused the credit")]
    Refused,
}

fn credit_key(id: &str) -> Key {
    Key::builder()
        .literal("txn-")
        .and_then(|b| b.part("id", id))
        .and_then(|b| b.literal(":credit:A1"))
        .and_then(|b| b.finish())
        .expect("a valid key")
}

/// A file with the store's schema and the application's table `credits`.
fn file_with_credits() -> (TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("idempotent-sqlite-txn-")
        .tempdir()
        .expect("a temporary directory");
    let path = dir.path().join("shop.db");
    drop(SqliteStore::open(&path).expect("create the store's schema"));
    rusqlite::Connection::open(&path)
        .expect("open by hand")
        .execute_batch("CREATE TABLE credits (order_id TEXT NOT NULL, cents INTEGER NOT NULL)")
        .expect("create the application's table");
    (dir, path)
}

fn cents(path: &Path) -> Vec<i64> {
    let conn = rusqlite::Connection::open(path).expect("open by hand");
    let mut statement = conn
        .prepare("SELECT cents FROM credits ORDER BY rowid")
        .expect("read the credits");
    statement
        .query_map([], |row| row.get(0))
        .expect("read the credits")
        .collect::<rusqlite::Result<_>>()
        .expect("read the credits")
}

fn insert(tx: &rusqlite::Transaction<'_>, cents: i64) -> rusqlite::Result<usize> {
    tx.execute(
        "INSERT INTO credits (order_id, cents) VALUES ('A1', ?1)",
        [cents],
    )
}

/// Issues a credit of 42 under `key`: one row in `credits`, counted in
/// `acted`.
async fn issue_credit(
    store: &SqliteStore,
    key: Key,
    acted: &Arc<AtomicUsize>,
) -> Result<Outcome<i64>, CreditError> {
    let acted = Arc::clone(acted);
    Call::new("shop::issue_credit", key)
        .run_in_transaction(store, move |tx| {
            acted.fetch_add(1, Ordering::SeqCst);
            insert(tx, 42)?;
            Ok(42)
        })
        .await
}

/// An action that writes `cents`, says so on `written`, and waits on `go`
/// before it returns, inside its transaction.
fn paused_credit(
    cents: i64,
    acted: &Arc<AtomicUsize>,
    written: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
) -> impl FnOnce(&rusqlite::Transaction<'_>) -> Result<i64, CreditError> + Send + 'static {
    let acted = Arc::clone(acted);
    move |tx| {
        acted.fetch_add(1, Ordering::SeqCst);
        insert(tx, cents)?;
        let _ = written.send(());
        let _ = go.recv();
        Ok(cents)
    }
}

/// Waits, off the runtime, for a message on `rx`.
async fn received(rx: mpsc::Receiver<()>) -> mpsc::Receiver<()> {
    tokio::task::spawn_blocking(move || {
        rx.recv().expect("the other side says so");
        rx
    })
    .await
    .expect("wait for the message")
}

pub async fn a_duplicate_waits_for_the_commit_and_replays_the_committed_result() {
    let (_dir, path) = file_with_credits();
    let store = Arc::new(SqliteStore::open(&path).expect("open"));
    let key = credit_key(&unique_id());
    let acted = Arc::new(AtomicUsize::new(0));
    let (written_tx, written) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let first = tokio::spawn({
        let (store, key) = (Arc::clone(&store), key.clone());
        let action = paused_credit(42, &acted, written_tx, go_rx);
        async move {
            Call::new("shop::issue_credit", key)
                .run_in_transaction(&store, action)
                .await
        }
    });
    let _written = received(written).await;
    let before = store.statements();
    let duplicate = tokio::spawn({
        let (store, key, acted) = (Arc::clone(&store), key.clone(), Arc::clone(&acted));
        async move { issue_credit(&store, key, &acted).await }
    });
    // The duplicate's claim is on its way to the file, whose write lock the
    // first call's transaction holds; it replays whenever it gets there.
    while store.statements() == before {
        tokio::task::yield_now().await;
    }
    go.send(()).expect("let the first call commit");
    let first = first.await.expect("the first call").expect("it acts");
    assert!(matches!(first, Outcome::Fresh { value: 42 }), "{first:?}");
    let duplicate = duplicate.await.expect("the duplicate").expect("it replays");
    assert!(
        matches!(duplicate, Outcome::Replay { value: 42, .. }),
        "{duplicate:?}"
    );
    assert_eq!(acted.load(Ordering::SeqCst), 1, "the action ran once");
    assert_eq!(cents(&path), vec![42], "one credit committed");
}

pub async fn a_failing_action_leaves_no_write_and_a_retry_acts_once() {
    let (_dir, path) = file_with_credits();
    let store = SqliteStore::open(&path).expect("open");
    let key = credit_key(&unique_id());
    let failed = Call::new("shop::issue_credit", key.clone())
        .run_in_transaction(&store, |tx| {
            insert(tx, 42)?;
            Err::<i64, _>(CreditError::Refused)
        })
        .await;
    assert!(matches!(failed, Err(CreditError::Refused)), "{failed:?}");
    assert!(
        cents(&path).is_empty(),
        "the failed action's write rolled back"
    );
    let acted = Arc::new(AtomicUsize::new(0));
    let retry = issue_credit(&store, key, &acted)
        .await
        .expect("the retry acts");
    assert!(matches!(retry, Outcome::Fresh { value: 42 }), "{retry:?}");
    assert_eq!(acted.load(Ordering::SeqCst), 1);
    assert_eq!(cents(&path), vec![42]);
}

pub async fn a_call_dropped_before_its_commit_leaves_nothing_and_the_retry_acts_once() {
    let (_dir, path) = file_with_credits();
    let store = Arc::new(SqliteStore::open(&path).expect("open"));
    let key = credit_key(&unique_id());
    let dropped_acted = Arc::new(AtomicUsize::new(0));
    let (written_tx, written) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let dropped = tokio::spawn({
        let (store, key) = (Arc::clone(&store), key.clone());
        let action = paused_credit(7, &dropped_acted, written_tx, go_rx);
        async move {
            Call::new("shop::issue_credit", key)
                .run_in_transaction(&store, action)
                .await
        }
    });
    let _written = received(written).await;
    // Dropped while its action, on the blocking pool, is inside the
    // transaction; then the action returns.
    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    go.send(()).expect("let the action return");
    let acted = Arc::new(AtomicUsize::new(0));
    let retry = issue_credit(&store, key, &acted)
        .await
        .expect("the retry acts once the dropped call's claim is released");
    assert!(matches!(retry, Outcome::Fresh { value: 42 }), "{retry:?}");
    assert_eq!(dropped_acted.load(Ordering::SeqCst), 1);
    assert_eq!(acted.load(Ordering::SeqCst), 1);
    assert_eq!(
        cents(&path),
        vec![42],
        "the dropped call's write rolled back"
    );
}

thread_local! {
    /// On the thread of a holder to pause: where it says it claimed, and
    /// what lets it go on.
    static PAUSE: RefCell<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>> =
        const { RefCell::new(None) };
}

/// Pauses the thread that asked for it ([`PAUSE`]) at the guard's
/// "claimed" event (the `debug` event with the claim's `fence`), until it is
/// let go: the claim is held, and its transaction not yet begun.
struct PauseWhenClaimed;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PauseWhenClaimed {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() == "idempotent_tools"
            && *meta.level() == tracing::Level::DEBUG
            && meta.fields().field("fence").is_some()
        {
            PAUSE.with(|pause| {
                if let Some((paused, go)) = pause.borrow().as_ref() {
                    let _ = paused.send(());
                    let _ = go.recv();
                }
            });
        }
    }
}

/// Installs [`PauseWhenClaimed`] for the whole test binary, before any case
/// runs. A subscriber of one thread's own would not do: the guard's events
/// are met first on other cases' threads, and the interest cached then
/// could keep them from it.
pub fn install_pause_layer() {
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(PauseWhenClaimed))
        .expect("the test binary's only subscriber");
}

pub async fn a_stale_holder_whose_claim_was_taken_over_has_its_write_rolled_back() {
    let (_dir, path) = file_with_credits();
    let key = credit_key(&unique_id());
    let (paused_tx, paused) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let stale_acted = Arc::new(AtomicUsize::new(0));
    // The stale holder: a process of its own, in effect (its own store on
    // the file, its own thread and runtime), paused after its claim.
    let stale = std::thread::spawn({
        let (path, key, acted) = (path.clone(), key.clone(), Arc::clone(&stale_acted));
        move || {
            PAUSE.with(|pause| *pause.borrow_mut() = Some((paused_tx, go_rx)));
            // Another test's thread may have met the guard's events first,
            // with no subscriber to want them: ask every callsite again, so
            // that this thread's subscriber sees them.
            tracing::callsite::rebuild_interest_cache();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let store = SqliteStore::open(&path).expect("open");
            runtime.block_on(
                Call::new("shop::issue_credit", key)
                    .lease(Duration::from_secs(60))
                    .run_in_transaction(&store, move |tx| {
                        acted.fetch_add(1, Ordering::SeqCst);
                        insert(tx, 7)?;
                        Ok::<_, CreditError>(7_i64)
                    }),
            )
        }
    });
    let _paused = received(paused).await;
    // Its lease runs out, as if its renewals had stalled with it.
    rusqlite::Connection::open(&path)
        .expect("open by hand")
        .execute("UPDATE idempotent_claims SET lease_until = 0", [])
        .expect("expire the lease");
    let store = SqliteStore::open(&path).expect("open");
    let acted = Arc::new(AtomicUsize::new(0));
    let taker = issue_credit(&store, key, &acted)
        .await
        .expect("the takeover acts");
    assert!(matches!(taker, Outcome::Fresh { value: 42 }), "{taker:?}");
    go.send(()).expect("wake the stale holder");
    let stale = tokio::task::spawn_blocking(move || stale.join().expect("the stale holder"))
        .await
        .expect("join the stale holder");
    match stale {
        Err(CreditError::Idempotency(error @ Error::RolledBack { .. })) => {
            assert_eq!(error.action_ran(), Some(false));
            let cause = std::error::Error::source(&error).expect("a cause");
            assert!(
                matches!(
                    cause.downcast_ref::<StoreError>(),
                    Some(StoreError::LeaseLost)
                ),
                "{cause:?}"
            );
            assert!(error.to_string().contains("did not take effect"), "{error}");
        }
        other => panic!("the stale holder's transaction must roll back, got {other:?}"),
    }
    assert_eq!(
        stale_acted.load(Ordering::SeqCst),
        1,
        "the stale holder wrote"
    );
    assert_eq!(acted.load(Ordering::SeqCst), 1);
    assert_eq!(
        cents(&path),
        vec![42],
        "only the new holder's credit committed"
    );
}

pub async fn a_process_killed_between_its_write_and_its_commit_leaves_nothing_and_the_retry_acts_once()
 {
    let (_dir, path) = file_with_credits();
    let store = SqliteStore::open(&path).expect("open");
    let id = unique_id();
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .env(CHILD_FILE, &path)
        .env(CHILD_KEY, &id)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().expect("the child's stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("read the child")
    .expect("the child's line");
    assert_eq!(line.trim(), WRITTEN, "the child wrote in its transaction");
    // SIGKILL, between the write and the commit, the file's write lock held.
    child.kill().expect("kill the child");
    child.wait().expect("the child ends");
    let acted = Arc::new(AtomicUsize::new(0));
    let retry = issue_credit(&store, credit_key(&id), &acted)
        .await
        .expect("the retry takes over once the lease runs out, and acts");
    assert!(matches!(retry, Outcome::Fresh { value: 42 }), "{retry:?}");
    assert_eq!(acted.load(Ordering::SeqCst), 1);
    assert_eq!(
        cents(&path),
        vec![42],
        "the killed child's write never committed"
    );
}

/// The child: claims the key, writes its credit, says so, and waits to be
/// killed.
pub fn child(path: &str) -> ! {
    let id = std::env::var(CHILD_KEY).expect("the child's key");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let store = SqliteStore::open(path).expect("a store");
        let _ = Call::new("shop::issue_credit", credit_key(&id))
            .lease(CHILD_LEASE)
            .run_in_transaction(&store, |tx| {
                insert(tx, 7)?;
                let mut out = std::io::stdout();
                writeln!(out, "{WRITTEN}").expect("tell the parent");
                out.flush().expect("tell the parent");
                loop {
                    std::thread::park();
                }
                #[allow(unreachable_code)]
                Ok::<_, CreditError>(7_i64)
            })
            .await;
    });
    std::process::exit(1)
}
