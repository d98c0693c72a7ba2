//! Errors: a server that is down is unavailable and nothing runs, a server
//! error names the statement, its SQLSTATE and the server's message, and
//! each cause is printed once.

use std::sync::Arc;

use idempotent_tools::PostgresStore;
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
