//! The SQLite store: the conformance suite (one statement per step, leases
//! and fences, purging in batches, several OS processes on one file), and
//! what is SQLite's own (a locked file, a file that cannot be opened, a new
//! file that six processes create at once, schema versions).

mod harness;
mod sqlite_cases;

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::SqliteStore;
use idempotent_tools::store::sqlite::rusqlite;
use idempotent_tools::store::{Store, StoreError};
use idempotent_tools_testing::conformance::kit::{
    self, CountingProvider as Provider, PATIENCE, fresh_run, refund_call, refunds,
};
use idempotent_tools_testing::conformance::processes::{self, Scene};
use idempotent_tools_testing::conformance::{Scope, Suite};
use tempfile::TempDir;

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("idempotent-sqlite-")
        .tempdir()
        .expect("a temporary directory")
}

/// The case's store: `claims.db` in the case's directory, purging in the
/// batches the case asks for. A child process opens its parent's file.
async fn in_scope(scope: Scope) -> SqliteStore {
    let mut builder = SqliteStore::builder(scope.dir().join("claims.db"));
    if let Some(rows) = scope.purge_batch() {
        builder = builder.purge_batch(rows);
    }
    builder.open().expect("open the store")
}

/// A store whose statements give up on another process's write lock after
/// 50 ms, and a second connection to its file.
fn store_and_locker(path: &std::path::Path) -> (Arc<SqliteStore>, rusqlite::Connection) {
    let store = SqliteStore::builder(path)
        .busy_timeout(Duration::from_millis(50))
        .open()
        .expect("open");
    let locker = rusqlite::Connection::open(path).expect("a second connection");
    (Arc::new(store), locker)
}

/// A claim that meets the file locked past the busy timeout is tried again
/// while the call may wait, and acts once the lock is gone: delayed, not
/// failed.
async fn a_database_locked_past_the_busy_timeout_delays_a_claim_instead_of_failing_it() {
    let dir = temp_dir();
    let (sqlite, locker) = store_and_locker(&dir.path().join("claims.db"));
    let store: Arc<dyn Store> = sqlite.clone();
    let (run, provider) = (fresh_run(), Arc::new(Provider::default()));

    locker
        .execute_batch("BEGIN EXCLUSIVE")
        .expect("take the write lock");
    let before = sqlite.transactions();
    let call = {
        let (call, provider) = (refund_call(&store, &run, "1182", 42), provider.clone());
        tokio::spawn(async move { call.run(refunds(&provider, 42)).await })
    };
    // A lone step is one transaction, busy or not: a second is the claim
    // tried again after the busy timeout.
    let retried = async {
        while sqlite.transactions() - before < 2 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(PATIENCE, retried)
        .await
        .expect("a claim tried again after the busy timeout");
    assert_eq!(provider.refunds(), 0, "nothing ran without its claim");
    locker.execute_batch("ROLLBACK").expect("release the lock");

    let outcome = call
        .await
        .expect("joined")
        .expect("the call, once the lock is gone");
    assert!(outcome.is_fresh(), "{outcome:?}");
    assert_eq!(provider.refunds(), 1);
}

/// A file locked past the call's own `wait`: the call fails as contended,
/// and the action does not run; once the lock is gone the call acts, once.
async fn a_database_locked_past_the_calls_wait_is_contended_and_nothing_runs() {
    let dir = temp_dir();
    let (sqlite, locker) = store_and_locker(&dir.path().join("claims.db"));
    let store: Arc<dyn Store> = sqlite;
    let (run, provider) = (fresh_run(), Provider::default());

    locker
        .execute_batch("BEGIN EXCLUSIVE")
        .expect("take the write lock");
    let err = refund_call(&store, &run, "1182", 42)
        .wait(Duration::from_millis(300))
        .run(refunds(&provider, 42))
        .await
        .expect_err("the file stays locked");
    let err = err.guard().expect("a guard error");
    assert!(
        matches!(
            err,
            idempotent_tools::Error::Store(StoreError::Contended(_))
        ),
        "{err:?}"
    );
    assert_eq!(err.action_ran(), Some(false));
    assert_eq!(provider.refunds(), 0, "nothing ran without its claim");
    locker.execute_batch("ROLLBACK").expect("release the lock");

    let retry = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("retry");
    assert!(
        retry.is_fresh(),
        "nothing was recorded while the file was locked"
    );
    assert_eq!(provider.refunds(), 1);
}

async fn a_claim_the_database_refuses_is_a_backend_error_and_nothing_runs() {
    let dir = temp_dir();
    let path = dir.path().join("claims.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open"));
    rusqlite::Connection::open(&path)
        .expect("a second connection")
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON idempotent_claims
             BEGIN SELECT RAISE(ABORT, 'claims are refused today'); END;",
        )
        .expect("a trigger that refuses claims");
    kit::refused_by_the_server(&store, &fresh_run(), &Provider::default()).await;
}

fn a_file_that_cannot_be_opened_is_a_typed_error() {
    let dir = temp_dir();
    let missing = dir.path().join("no-such-directory").join("claims.db");
    let Err(err) = SqliteStore::open(&missing) else {
        panic!("a file in a missing directory cannot be opened");
    };
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    // The message names the store and the place; the cause follows in the
    // error's chain, once.
    let message = err.to_string();
    assert!(message.contains("SQLite"), "{message}");
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );
    let cause = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        cause.is_some_and(|cause| cause.contains("unable to open")),
        "{err:?}"
    );
}

async fn measured_latency_of_a_guarded_call_on_a_local_file() {
    let dir = temp_dir();
    let store = SqliteStore::open(dir.path().join("claims.db")).expect("open");
    kit::measure_latency_of_a_guarded_call(Arc::new(store)).await;
}

// Several processes on one file; the suite plays the others on a file the
// parent created first.

fn six_processes_opening_a_new_file_and_refunding_the_same_order_at_once_refund_it_once() {
    // No file yet: the six processes create it (and its schema) together.
    processes::six_processes_refunding_the_same_order_at_once_refund_it_once(&Scene::new());
}

/// A file at schema version 1, as stores before schema versions left it:
/// the claims table alone, its state `held` or `done` with the end in
/// `ending`, and `finished_at`. Its rows are this file's, written back in
/// that shape.
fn downgrade_to_version_1(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).expect("open by hand");
    conn.execute_batch(&format!(
        "ALTER TABLE idempotent_claims RENAME TO claims_now;
         DROP INDEX idempotent_claims_expires_at;
         DROP INDEX idempotent_claims_tool_state;
         {v1}
         INSERT INTO idempotent_claims
             (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
              lease_until, ending, result, finished_at, expires_at)
         SELECT key_digest, key_text, tool, fingerprint,
                CASE state WHEN 'held' THEN 'held' ELSE 'done' END,
                owner, fence, taken_over, lease_until,
                CASE state WHEN 'done' THEN 'ok' WHEN 'failed' THEN 'err'
                           WHEN 'unknown' THEN 'unknown' END,
                result, completed_at, expires_at
         FROM claims_now;
         DROP TABLE claims_now;
         DROP TABLE idempotent_schema;",
        v1 = include_str!("../runtime/src/store/sqlite/v1.sql"),
    ))
    .expect("back to version 1");
}

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
                supported: idempotent_tools::store::SCHEMA_VERSION
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("version 99"), "{err}");
}

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

fn main() {
    // A child of `transactions`' kill -9 case: it writes, then is killed.
    if let Ok(path) = std::env::var(sqlite_cases::transactions::CHILD_FILE) {
        sqlite_cases::transactions::child(&path);
    }
    sqlite_cases::transactions::install_pause_layer();
    let mut trials = Suite::new(in_scope)
        .with_records()
        .racing_callers(200)
        .purging_in_batches()
        .counting_statements(SqliteStore::statements)
        .trials();
    trials.extend(trials!(always;
        a_database_locked_past_the_busy_timeout_delays_a_claim_instead_of_failing_it,
        a_database_locked_past_the_calls_wait_is_contended_and_nothing_runs,
        a_claim_the_database_refuses_is_a_backend_error_and_nothing_runs,
        measured_latency_of_a_guarded_call_on_a_local_file,
        a_version_1_file_is_upgraded_in_place_and_keeps_its_records,
        sqlite_cases::batches::callers_queued_behind_a_write_each_get_their_own_answer_and_act_once_per_key,
        sqlite_cases::batches::a_step_the_database_refuses_fails_only_its_own_caller,
        sqlite_cases::batches::claims_whose_callers_left_while_queued_or_while_their_batch_waited_are_not_held,
        sqlite_cases::transactions::a_duplicate_waits_for_the_commit_and_replays_the_committed_result,
        sqlite_cases::transactions::a_failing_action_leaves_no_write_and_a_retry_acts_once,
        sqlite_cases::transactions::a_call_dropped_before_its_commit_leaves_nothing_and_the_retry_acts_once,
        sqlite_cases::transactions::a_stale_holder_whose_claim_was_taken_over_has_its_write_rolled_back,
        sqlite_cases::transactions::a_process_killed_between_its_write_and_its_commit_leaves_nothing_and_the_retry_acts_once,
    ));
    trials.extend(trials!(plain;
        a_file_that_cannot_be_opened_is_a_typed_error,
        six_processes_opening_a_new_file_and_refunding_the_same_order_at_once_refund_it_once,
        a_schema_newer_than_the_code_is_refused_with_both_versions,
        opening_without_create_refuses_a_file_without_the_schema,
    ));
    harness::main_waiting(trials);
}
