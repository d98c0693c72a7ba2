//! LISTEN/NOTIFY: a waiter on another connection is woken by a
//! notification, only a completion a waiter marked notifies, a waiter
//! outlives its listening connection being killed, and a store without a
//! listener polls.

use std::time::{Duration, Instant};

use idempotent_tools::store::postgres::tokio_postgres::{self, NoTls};
use idempotent_tools::store::postgres::{PostgresStoreBuilder, deadpool_postgres};
use idempotent_tools::{
    call::Key,
    store::{ClaimAnswer, Store},
};
use idempotent_tools_testing::conformance::kit::{
    claimed, done, fresh_run, in_flight, refund_key, request,
};

use crate::{Schema, admin, unique_schema};

pub(super) async fn a_waiter_on_another_connection_is_woken_by_notify_not_by_polling() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let holder_store = schema.store().await;
    let waiter_store = schema.store().await;
    assert!(waiter_store.listening().await);
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let woken = in_flight(&waiter_store, &key).await;
    let waiting = tokio::spawn(woken);
    let completed_at = Instant::now();
    holder_store
        .complete(&claim, done("1"))
        .await
        .expect("complete");
    tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("woken well before the 2 s recheck or the 30 s lease")
        .expect("task");
    println!(
        "measured: a waiter on another connection woke {:?} after the completion",
        completed_at.elapsed()
    );
}

pub(super) async fn only_a_completion_a_waiter_marked_notifies() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let (listener, connection) = tokio_postgres::connect(&schema.url, NoTls)
        .await
        .expect("a listening connection");
    let (sent, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let mut connection = connection;
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let Ok(tokio_postgres::AsyncMessage::Notification(n)) = message
                && sent.send(n.payload().to_owned()).is_err()
            {
                return;
            }
        }
    });
    listener
        .batch_execute("LISTEN idempotent_claims")
        .await
        .expect("listen");
    let holder = schema.store().await;
    let waiter = schema.store().await;
    assert!(waiter.listening().await);
    // Other tests share the channel: only this test's keys count.
    let heard_for = |key: &Key, heard: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        let digest = hex(&key.digest());
        let mut count = 0;
        while let Ok(payload) = heard.try_recv() {
            count += usize::from(payload == digest);
        }
        count
    };

    let alone = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder, request(&alone, Duration::from_secs(30))).await;
    holder.complete(&claim, done("1")).await.expect("complete");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(heard_for(&alone, &mut heard), 0, "nobody waited: no NOTIFY");

    let waited = refund_key(&fresh_run(), "1183");
    let claim = claimed(&holder, request(&waited, Duration::from_secs(30))).await;
    let woken = tokio::spawn(in_flight(&waiter, &waited).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.complete(&claim, done("1")).await.expect("complete");
    tokio::time::timeout(Duration::from_secs(1), woken)
        .await
        .expect("the waiter is woken by the notification")
        .expect("the waiter ends");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        heard_for(&waited, &mut heard),
        1,
        "a waiter marked it: one NOTIFY"
    );
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) async fn a_waiter_outlives_its_listening_connection_being_killed() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let holder_store = schema.store().await;
    let name = unique_schema();
    let mut config = schema.config();
    config.application_name(&name);
    let waiter_store = PostgresStoreBuilder::from_config(config)
        .connect_lazy()
        .expect("store");
    assert!(waiter_store.listening().await);
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let first = in_flight(&waiter_store, &key).await;

    let killed = admin(&schema.url)
        .await
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND query = 'LISTEN idempotent_claims'",
            &[&name],
        )
        .await
        .expect("terminate the listener");
    assert_eq!(killed, 1, "one listening connection");
    // Notifications may be lost while it is down: every waiter is woken to
    // look again.
    tokio::time::timeout(Duration::from_secs(1), first)
        .await
        .expect("woken when the listener dropped");

    let second = in_flight(&waiter_store, &key).await;
    holder_store
        .complete(&claim, done("1"))
        .await
        .expect("complete");
    tokio::time::timeout(Duration::from_secs(3), second)
        .await
        .expect("woken by the reconnected listener or the recheck");
    assert!(matches!(
        waiter_store
            .claim(request(&key, Duration::from_secs(30)))
            .await,
        Ok(ClaimAnswer::Completed(_))
    ));
}

pub(super) async fn a_store_on_an_applications_pool_without_a_listener_polls_and_still_replays() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    schema.store().await;
    let pool =
        deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(schema.config(), NoTls))
            .max_size(4)
            .build()
            .expect("pool");
    let holder_store = schema.store().await;
    let polling = PostgresStoreBuilder::from_pool(pool)
        .connect_lazy()
        .expect("a store");
    assert!(!polling.listening().await, "no listener was given");
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder_store, request(&key, Duration::from_secs(30))).await;
    let woken = in_flight(&polling, &key).await;
    let waiting = tokio::spawn(woken);
    holder_store
        .complete(&claim, done("1"))
        .await
        .expect("complete");
    // Polls back off to 250 ms; the lease has 30 s left.
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the poll sees the completion")
        .expect("task");
    match polling
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimAnswer::Completed(done) => assert_eq!(done.value.to_json().expect("json"), "1"),
        other => panic!("expected a replay, got {other:?}"),
    }
}
