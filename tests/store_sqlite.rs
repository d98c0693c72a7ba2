//! The SQLite store: the whole adversarial suite, the durable suite (one
//! statement per step, leases and fences, purging), what is SQLite's own (a
//! locked file, a file that cannot be opened), and several OS processes on
//! one file.
#![cfg(feature = "sqlite")]

mod adversarial;
mod cancellation;
mod durable;
mod inspection;
mod multiprocess;

use std::sync::Arc;
use std::time::Duration;

use adversarial::{Provider, fresh_run, refund_call, refunds};
use durable::Durable;
use idempotent_tools::store::SqliteStore;
use idempotent_tools::store::sqlite::rusqlite;
use idempotent_tools::{Store, StoreError};
use multiprocess::Scene;
use tempfile::TempDir;

/// A store that owns its directory, removed after the store is closed.
type InDir = durable::Held<SqliteStore, TempDir>;

impl Durable for SqliteStore {
    fn statements(&self) -> u64 {
        SqliteStore::statements(self)
    }
}

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("idempotent-sqlite-")
        .tempdir()
        .expect("a temporary directory")
}

/// A store on a new file in a directory of its own, purging `purge_batch`
/// rows per statement if given.
async fn in_dir(purge_batch: Option<usize>) -> Option<InDir> {
    let dir = temp_dir();
    let mut builder = SqliteStore::builder(dir.path().join("claims.db"));
    if let Some(rows) = purge_batch {
        builder = builder.purge_batch(rows);
    }
    let store = builder.open().expect("open the store");
    Some(InDir { store, place: dir })
}

async fn sqlite() -> Option<Arc<dyn Store>> {
    let store: Arc<dyn Store> = Arc::new(in_dir(None).await?);
    Some(store)
}

adversarial_suite!(sqlite(), callers = 200);
cancellation_suite!(sqlite());
durable_suite!(in_dir);
inspection_suite!(sqlite());

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
    durable::refused_as_unavailable(&store, &run, &provider).await;
    locker.execute_batch("ROLLBACK").expect("release the lock");

    let retry = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
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

#[tokio::test(flavor = "multi_thread")]
async fn measured_latency_of_a_guarded_call_on_a_local_file() {
    let Some(store) = in_dir(None).await else {
        return;
    };
    durable::measure_latency_of_a_guarded_call(store).await;
}

// Several processes on one file.

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

/// Children on `claims.db` in a new directory; the file does not exist yet.
fn scene() -> Scene {
    let dir = temp_dir();
    let path = dir.path().join("claims.db").display().to_string();
    Scene::new(dir, vec![("IDEMPOTENT_TEST_SQLITE", path)])
}

/// A scene whose file this process has already created, as an operator's
/// first open would.
fn scene_on_a_created_file() -> Scene {
    let scene = scene();
    drop(SqliteStore::open(scene.dir().join("claims.db")).expect("open"));
    scene
}

#[test]
fn six_processes_opening_a_new_file_and_refunding_the_same_order_at_once_refund_it_once() {
    // No file yet: the six processes create it (and its schema) together.
    multiprocess::six_processes_refunding_the_same_order_at_once_refund_it_once(&scene());
}

#[test]
fn a_holder_killed_mid_action_is_taken_over_once_after_its_lease() {
    multiprocess::a_holder_killed_mid_action_is_taken_over_once_after_its_lease(
        &scene_on_a_created_file(),
    );
}

#[test]
fn after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so() {
    multiprocess::after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so(
        &scene_on_a_created_file(),
    );
}

#[test]
fn a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result() {
    multiprocess::a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result(
        &scene_on_a_created_file(),
    );
}

/// A file at schema version 1: the claims table alone, as stores before
/// schema versions left it.
fn downgrade_to_version_1(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).expect("open by hand");
    conn.execute_batch("DROP TABLE idempotent_schema; DROP INDEX idempotent_claims_tool_state;")
        .expect("back to version 1");
}

#[tokio::test]
async fn a_version_1_file_is_upgraded_in_place_and_keeps_its_records() {
    let dir = temp_dir();
    let path = dir.path().join("claims.db");
    let run = fresh_run();
    let provider = Provider::default();
    {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open"));
        let first = refund_call(&store, &run, "1182", 42)
            .run(refunds(&provider, 42))
            .await;
        assert!(first.expect("fresh").is_fresh());
    }
    downgrade_to_version_1(&path);

    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("upgrade"));
    let conn = rusqlite::Connection::open(&path).expect("open by hand");
    let version: i64 = conn
        .query_row("SELECT max(version) FROM idempotent_schema", [], |r| {
            r.get(0)
        })
        .expect("a recorded version");
    assert_eq!(version, i64::from(idempotent_tools::store::SCHEMA_VERSION));
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await;
    assert!(again.expect("replay").is_replay());
    assert_eq!(provider.refunds(), 1);
}

#[test]
fn a_schema_newer_than_the_code_is_refused_with_both_versions() {
    let dir = temp_dir();
    let path = dir.path().join("claims.db");
    drop(SqliteStore::open(&path).expect("open"));
    rusqlite::Connection::open(&path)
        .expect("open by hand")
        .execute(
            "INSERT INTO idempotent_schema (version, applied_at) VALUES (99, 0)",
            [],
        )
        .expect("a newer version");
    let err = SqliteStore::open(&path).expect_err("too new");
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

#[test]
fn opening_without_create_refuses_a_file_without_the_schema() {
    let dir = temp_dir();
    let path = dir.path().join("other.db");
    rusqlite::Connection::open(&path)
        .expect("an unrelated database")
        .execute_batch("CREATE TABLE unrelated (x INTEGER)")
        .expect("a table");
    let err = SqliteStore::builder(&path)
        .create(false)
        .open()
        .expect_err("no schema");
    assert!(matches!(err, StoreError::MissingSchema), "{err:?}");
    let tables: i64 = rusqlite::Connection::open(&path)
        .expect("open by hand")
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE 'idempotent%'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(tables, 0, "nothing was created");
}
