//! Errors: a server that is down is unavailable and nothing runs, a server
//! error names the statement, its SQLSTATE and the server's message, and
//! each cause is printed once.

use std::sync::Arc;

use idempotent_tools::PostgresStore;
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::{Store, StoreError};
use idempotent_tools_testing::conformance::kit::{
    self, CountingProvider as Provider, assert_each_cause_once, error_chain, fresh_run,
    refund_call, refunds,
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

/// A claim that waits on a lock past the session's `lock_timeout`
/// (SQLSTATE 55P03): the statement changed nothing, so the store is
/// unavailable for this call and the action does not run; once the lock is
/// gone the call acts, once.
pub(super) async fn a_lock_timeout_is_unavailable_and_the_call_acts_once_the_lock_is_gone() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema
        .store_with(|_| {
            let mut config = schema.config();
            config.options(format!(
                "-c search_path={} -c lock_timeout=50ms",
                schema.name
            ));
            PostgresStoreBuilder::from_config(config)
        })
        .await;
    let store: Arc<dyn Store> = Arc::new(store);
    let (provider, run) = (Provider::default(), fresh_run());
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("the first refund");
    assert!(first.is_fresh());

    // Another session locks the table against writes (an operator's
    // migration, say), and keeps its transaction open.
    let url = url().expect("url");
    let mut locker = admin(&url).await;
    let locking = locker.transaction().await.expect("a transaction");
    locking
        .batch_execute(&format!(
            "LOCK TABLE {}.idempotent_claims IN EXCLUSIVE MODE",
            schema.name
        ))
        .await
        .expect("lock the table");

    let err = refund_call(&store, &run, "1183", 42)
        .run(refunds(&provider, 42))
        .await
        .expect_err("the table is locked");
    let err = err.guard().expect("a guard error");
    assert!(
        matches!(
            err,
            idempotent_tools::Error::Store(StoreError::Unavailable(_))
        ),
        "{err:?}"
    );
    assert_eq!(err.action_ran(), Some(false));
    let all = error_chain(err).join(": ");
    assert!(all.contains("SQLSTATE 55P03"), "{all}");
    assert_eq!(provider.refunds(), 1, "nothing ran without its claim");

    locking.commit().await.expect("release the lock");
    let later = refund_call(&store, &run, "1183", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("the call, once the lock is gone");
    assert!(later.is_fresh());
    assert_eq!(provider.refunds(), 2, "one refund per order");
}
