//! Errors: a server that is down is unavailable and nothing runs, a server
//! error names the statement, its SQLSTATE and the server's message, and
//! each cause is printed once; a statement that gave way to another writer
//! (a lock timeout, a serialization failure, a deadlock) changed nothing:
//! a claim and a completion are tried again while the call may wait and
//! the lease holds, and only then reported as contended.

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::PostgresStore;
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::tokio_postgres;
use idempotent_tools::store::{Store, StoreError};
use idempotent_tools_testing::conformance::kit::{
    self, CountingProvider as Provider, Ends, Holder, PATIENCE, assert_each_cause_once,
    error_chain, fresh_run, refund_call, refunds,
};

use crate::{Schema, admin, url};

pub(super) async fn a_server_that_is_down_is_unavailable_and_nothing_runs() {
    // Port 1 on the loopback: nothing listens there.
    let down = "postgres://postgres@127.0.0.1:1/test";
    let connected = PostgresStore::connect(down).await;
    assert!(
        matches!(connected, Err(StoreError::Unavailable(_))),
        "{connected:?}"
    );
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::builder(down)
            .connect_lazy()
            .expect("a lazy store"),
    );
    let provider = Provider::default();
    kit::refused_as_unavailable(&store, &fresh_run(), &provider).await;
}

pub(super) async fn a_server_error_names_the_statement_its_sqlstate_and_the_servers_message() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    let url = url().expect("url");
    admin(&url)
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION {s}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'claims are refused today'; END $$;
             CREATE TRIGGER refuse BEFORE INSERT ON {s}.idempotent_claims
             FOR EACH ROW EXECUTE FUNCTION {s}.refuse();",
            s = schema.name
        ))
        .await
        .expect("a trigger that refuses claims");
    let store: Arc<dyn Store> = Arc::new(store);
    let provider = Provider::default();
    let err = refund_call(&store, &fresh_run(), "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect_err("refused");
    assert_eq!(provider.refunds(), 0);
    let err = err.guard().expect("a guard error");
    assert_eq!(err.action_ran(), Some(false));
    let messages = error_chain(err);
    let all = messages.join(": ");
    assert!(all.contains("`claim` statement"), "{all}");
    assert!(all.contains("SQLSTATE P0001"), "{all}");
    assert!(all.contains("claims are refused today"), "{all}");
    assert_each_cause_once(&messages);
}

pub(super) async fn an_unreachable_server_prints_each_cause_once() {
    let down = "postgres://postgres@127.0.0.1:1/test";
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::builder(down)
            .connect_lazy()
            .expect("a lazy store"),
    );
    let provider = Provider::default();
    let err = refund_call(&store, &fresh_run(), "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect_err("down");
    let messages = error_chain(err.guard().expect("a guard error"));
    assert!(messages.len() >= 3, "{messages:?}");
    assert_each_cause_once(&messages);
}

/// A store whose sessions give up on a lock after `lock_timeout`, as a
/// production role is often set up.
async fn store_with_lock_timeout(schema: &Schema, lock_timeout: &str) -> PostgresStore {
    schema
        .store_with(|_| {
            PostgresStoreBuilder::from_config(
                schema.config_with(&format!("-c lock_timeout={lock_timeout}")),
            )
        })
        .await
}

/// Another session (an operator's migration, say) that holds the claims
/// table locked against writes in an open transaction, until it commits.
async fn lock_the_table(schema: &Schema) -> tokio_postgres::Client {
    let url = url().expect("url");
    let locker = admin(&url).await;
    locker
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {}.idempotent_claims IN EXCLUSIVE MODE",
            schema.name
        ))
        .await
        .expect("lock the table");
    locker
}

/// A claim and a replay that meet a lock held past the session's
/// `lock_timeout` (SQLSTATE 55P03) are tried again while the call may wait,
/// and go through once the lock is gone: delayed, not failed, and each
/// order refunded once.
pub(super) async fn a_lock_held_past_lock_timeout_delays_a_claim_and_a_replay_instead_of_failing_them()
 {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let postgres = Arc::new(store_with_lock_timeout(&schema, "200ms").await);
    let store: Arc<dyn Store> = postgres.clone();
    let (provider, run) = (Arc::new(Provider::default()), fresh_run());
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("the first refund");
    assert!(first.is_fresh());

    let locker = lock_the_table(&schema).await;
    let before = postgres.statements();
    let call = |order: &'static str| {
        let (call, provider) = (refund_call(&store, &run, order, 42), provider.clone());
        tokio::spawn(async move { call.run(refunds(&provider, 42)).await })
    };
    let (repeat, fresh) = (call("1182"), call("1183"));
    // However the two claims went (alone, or in a batch the server refused
    // and whose members went again alone), at most three statements ran
    // before the guard tried again: a fourth is a claim tried again after a
    // lock timeout.
    let retried = async {
        while postgres.statements() - before < 4 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(PATIENCE, retried)
        .await
        .expect("a claim tried again after a lock timeout");
    assert_eq!(provider.refunds(), 1, "nothing ran without its claim");
    locker
        .batch_execute("COMMIT")
        .await
        .expect("release the lock");

    let repeat = repeat
        .await
        .expect("joined")
        .expect("the repeat, once the lock is gone");
    let fresh = fresh
        .await
        .expect("joined")
        .expect("the new refund, once the lock is gone");
    assert!(repeat.is_replay(), "{repeat:?}");
    assert!(fresh.is_fresh(), "{fresh:?}");
    assert_eq!(provider.refunds(), 2, "one refund per order");
}

/// A lock held past the call's own `wait`: the claim gave way every time,
/// so the call fails as contended, naming the lock timeout, and the action
/// does not run; once the lock is gone the call acts, once.
pub(super) async fn a_lock_held_past_the_calls_wait_is_contended_and_nothing_runs() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(store_with_lock_timeout(&schema, "50ms").await);
    let (provider, run) = (Provider::default(), fresh_run());
    let locker = lock_the_table(&schema).await;

    let err = refund_call(&store, &run, "1183", 42)
        .wait(Duration::from_millis(400))
        .run(refunds(&provider, 42))
        .await
        .expect_err("the table stays locked");
    let err = err.guard().expect("a guard error");
    assert!(
        matches!(
            err,
            idempotent_tools::Error::Store(StoreError::Contended(_))
        ),
        "{err:?}"
    );
    assert_eq!(err.action_ran(), Some(false));
    let chain = error_chain(err);
    let all = chain.join(": ");
    assert!(all.contains("SQLSTATE 55P03"), "{all}");
    assert_each_cause_once(&chain);
    assert_eq!(provider.refunds(), 0, "nothing ran without its claim");

    locker
        .batch_execute("COMMIT")
        .await
        .expect("release the lock");
    let later = refund_call(&store, &run, "1183", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("the call, once the lock is gone");
    assert!(later.is_fresh());
    assert_eq!(provider.refunds(), 1, "one refund");
}

/// A session of the test's own that holds the row of `key` locked, in an
/// open transaction, as another writer would.
struct RowLocker {
    client: tokio_postgres::Client,
    pid: i32,
}

impl RowLocker {
    async fn new(url: &str, set_up: &str) -> RowLocker {
        let client = admin(url).await;
        client.batch_execute(set_up).await.expect("set up");
        let pid = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .expect("pid")
            .get(0);
        RowLocker { client, pid }
    }

    /// Returns once a statement of another session waits for a lock this
    /// session holds.
    async fn until_blocking(&self, url: &str) {
        until_waiting(url, "$1 = ANY(pg_blocking_pids(pid))", self.pid).await;
    }
}

/// Returns once a session of `pg_stat_activity` matches `condition` on
/// `pid`: a statement waits for a lock.
async fn until_waiting(url: &str, condition: &str, pid: i32) {
    let watcher = admin(url).await;
    let query = format!("SELECT count(*) FROM pg_stat_activity WHERE {condition}");
    let waiting = tokio::time::timeout(PATIENCE, async {
        // The server's lock table, read until it shows the wait.
        loop {
            let waiting: i64 = watcher
                .query_one(&query, &[&pid])
                .await
                .expect("pg_stat_activity")
                .get(0);
            if waiting > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(waiting.is_ok(), "no statement waited for the lock");
}

/// A store in `schema` whose sessions also run with `options`.
async fn store_with_options(schema: &Schema, options: &str) -> Arc<PostgresStore> {
    Arc::new(
        schema
            .store_with(|_| PostgresStoreBuilder::from_config(schema.config_with(options)))
            .await,
    )
}

/// A completion that fails as the server says `40001` (a serialization
/// failure: its row changed under its snapshot) changed nothing, and is
/// tried again, and recorded.
pub(super) async fn a_serialization_failure_on_a_completion_is_tried_again_and_recorded() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let url = url().expect("url");
    let postgres =
        store_with_options(&schema, "-c default_transaction_isolation=serializable").await;
    let store: Arc<dyn Store> = postgres.clone();
    let (provider, run) = (Arc::new(Provider::default()), fresh_run());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42).lease(PATIENCE),
        provider.clone(),
        Ends::Refunding,
    )
    .await;

    // Another writer changes the claim's row, and commits only once the
    // completion waits for it: the completion's snapshot is then stale.
    let locker = RowLocker::new(&url, "BEGIN").await;
    locker
        .client
        .batch_execute(&format!(
            "UPDATE {}.idempotent_claims SET waiting = waiting",
            schema.name
        ))
        .await
        .expect("lock the row");
    let before = postgres.statements();
    let finished = tokio::spawn(holder.finish());
    locker.until_blocking(&url).await;
    locker.client.batch_execute("COMMIT").await.expect("commit");

    let finished = tokio::time::timeout(PATIENCE, finished)
        .await
        .expect("the completion")
        .expect("the task")
        .expect("the completion, recorded on its second try");
    assert!(finished.is_fresh());
    assert!(
        postgres.statements() - before >= 2,
        "refused once with SQLSTATE 40001, then recorded"
    );
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("a repeat");
    assert!(again.is_replay());
    assert_eq!(provider.refunds(), 1);
}

/// A completion chosen as a deadlock's victim (SQLSTATE 40P01) changed
/// nothing, and is tried again, and recorded. The deadlock is real: a
/// trigger makes the completion, once it holds the claim's row, wait for
/// a row another session holds, which waits for the claim's row. The
/// completion's wait begins last, so its session finds the deadlock.
pub(super) async fn a_deadlock_on_a_completion_is_tried_again_and_recorded() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let url = url().expect("url");
    let postgres = store_with_options(&schema, "-c deadlock_timeout=10ms").await;
    // The trigger first takes a lock that a gate session holds, so the test
    // decides when the completion reaches for the side row.
    admin(&url)
        .await
        .batch_execute(&format!(
            "CREATE TABLE {s}.side (id int PRIMARY KEY);
             INSERT INTO {s}.side VALUES (1);
             CREATE FUNCTION {s}.touch_side() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 PERFORM pg_advisory_xact_lock(hashtext('{s}'));
                 PERFORM 1 FROM {s}.side WHERE id = 1 FOR UPDATE;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER touch_side BEFORE UPDATE ON {s}.idempotent_claims
             FOR EACH ROW WHEN (NEW.state <> 'held') EXECUTE FUNCTION {s}.touch_side();",
            s = schema.name
        ))
        .await
        .expect("a trigger that locks a side table");
    let store: Arc<dyn Store> = postgres.clone();
    let (provider, run) = (Arc::new(Provider::default()), fresh_run());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42).lease(PATIENCE),
        provider.clone(),
        Ends::Refunding,
    )
    .await;

    let gate = RowLocker::new(
        &url,
        &format!(
            "BEGIN; SELECT pg_advisory_xact_lock(hashtext('{}'))",
            schema.name
        ),
    )
    .await;
    let other = RowLocker::new(
        &url,
        &format!(
            "SET deadlock_timeout = '1min'; BEGIN; SELECT 1 FROM {}.side WHERE id = 1 FOR UPDATE",
            schema.name
        ),
    )
    .await;
    let before = postgres.statements();
    let finished = tokio::spawn(holder.finish());
    // The completion holds the claim's row and waits at the gate.
    gate.until_blocking(&url).await;
    // The other session waits for the claim's row ...
    let other_update = {
        let update = format!(
            "UPDATE {}.idempotent_claims SET waiting = waiting",
            schema.name
        );
        let client = other.client;
        tokio::spawn(async move {
            client
                .batch_execute(&update)
                .await
                .expect("the other side of the deadlock goes through");
            client.batch_execute("COMMIT").await.expect("commit");
        })
    };
    until_waiting(
        &url,
        "pid = $1 AND cardinality(pg_blocking_pids(pid)) > 0",
        other.pid,
    )
    .await;
    // ... and the gate opens: the completion waits for the side row, and
    // finds the deadlock.
    gate.client
        .batch_execute("COMMIT")
        .await
        .expect("open the gate");

    // The other session went through, so the deadlock's victim was the
    // completion.
    tokio::time::timeout(PATIENCE, other_update)
        .await
        .expect("the other session")
        .expect("its task");
    let finished = tokio::time::timeout(PATIENCE, finished)
        .await
        .expect("the completion")
        .expect("the task")
        .expect("the completion, recorded on its second try");
    assert!(finished.is_fresh());
    assert!(
        postgres.statements() - before >= 2,
        "refused once with SQLSTATE 40P01, then recorded"
    );
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("a repeat");
    assert!(again.is_replay());
    assert_eq!(provider.refunds(), 1);
}
