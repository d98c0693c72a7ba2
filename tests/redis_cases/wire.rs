//! The Redis store's steps on the wire: wake-ups published only for a
//! waiter, scripts loaded again after the server forgot them, `WAIT`, round
//! trips under racing claims (whose answers the conformance suite checks),
//! and errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use idempotent_tools::RedisStore;
use idempotent_tools::store::redis::redis;
use idempotent_tools::store::{ClaimAnswer, Store, StoreError};

use super::hex;
use super::restart::Server;
use crate::{Prefixed, admin};
use idempotent_tools_testing::conformance::kit::{
    self, assert_each_cause_once, claimed, done, error_chain, fresh_run, in_flight, refund_key,
    request,
};

pub async fn a_waiter_is_woken_by_one_publish_and_a_completion_nobody_waits_for_publishes_none() {
    let Some(place) = Prefixed::new() else { return };
    let holder = place.store().await;
    let waiter = place.store().await;
    assert!(waiter.listening().await);
    // An outside subscriber counts what reaches the channel.
    let mut pubsub = redis::Client::open(place.url.as_str())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pubsub");
    pubsub
        .subscribe(holder.wake_channel())
        .await
        .expect("subscribe");
    let (sent, mut heard) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            if sent
                .send(message.get_payload::<String>().unwrap_or_default())
                .is_err()
            {
                return;
            }
        }
    });

    let alone = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder, request(&alone, Duration::from_secs(30))).await;
    holder.complete(&claim, done("1")).await.expect("complete");
    assert_eq!(holder.published(), 0, "nobody waited, nothing published");

    let awaited = refund_key(&fresh_run(), "1183");
    let claim = claimed(&holder, request(&awaited, Duration::from_secs(30))).await;
    let before = waiter.round_trips();
    let woken = in_flight(&waiter, &awaited).await;
    assert_eq!(
        waiter.round_trips() - before,
        1,
        "the claim marks the record itself"
    );
    let waiting = tokio::spawn(woken);
    let completed_at = Instant::now();
    holder.complete(&claim, done("2")).await.expect("complete");
    assert_eq!(
        holder.published(),
        1,
        "a marked record's completion publishes"
    );
    tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("woken well before the 2 s recheck or the 30 s lease")
        .expect("task");
    println!(
        "measured: a waiter on another connection woke {:?} after the completion",
        completed_at.elapsed()
    );
    // The release of a claim nobody waits for publishes nothing either.
    let released = refund_key(&fresh_run(), "1184");
    let claim = claimed(&holder, request(&released, Duration::from_secs(30))).await;
    holder.release(&claim).await.expect("release");
    assert_eq!(holder.published(), 1);

    let payload = tokio::time::timeout(Duration::from_secs(1), heard.recv())
        .await
        .expect("the publish reached the channel")
        .expect("a message");
    assert_eq!(payload, hex(&awaited.digest()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        heard.try_recv().is_err(),
        "exactly one message on the channel"
    );
}

pub async fn a_lost_wake_up_delays_a_waiter_by_at_most_the_recheck() {
    let Some(place) = Prefixed::new() else { return };
    let holder = place.store().await;
    let waiter = place.store().await;
    assert!(waiter.listening().await);
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&holder, request(&key, Duration::from_secs(30))).await;
    let woken = in_flight(&waiter, &key).await;
    // The message is lost: the waiter's mark is gone, so nothing publishes.
    let _: i64 = redis::cmd("HDEL")
        .arg(holder.record_key(&key))
        .arg("waiting")
        .query_async(&mut admin(&place.url).await)
        .await
        .expect("hdel");
    let waiting = tokio::spawn(woken);
    let completed_at = Instant::now();
    holder.complete(&claim, done("1")).await.expect("complete");
    assert_eq!(holder.published(), 0, "nothing was published");
    tokio::time::timeout(
        idempotent_tools::store::redis::RECHECK_EVERY + Duration::from_secs(3),
        waiting,
    )
    .await
    .expect("the waiter looks again on its timer, long before the 30 s lease")
    .expect("task");
    println!(
        "measured: a waiter whose wake-up was lost woke {:?} after the completion",
        completed_at.elapsed()
    );
    assert!(matches!(
        waiter.claim(request(&key, Duration::from_secs(30))).await,
        Ok(ClaimAnswer::Completed(_))
    ));
}

async fn flush_scripts(url: &str) {
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin(url).await)
        .await
        .expect("script flush");
}

pub async fn a_script_the_server_forgot_is_loaded_again_and_the_step_goes_through() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url();
    let store = RedisStore::connect(url.as_str()).await.expect("a store");
    let key = refund_key(&fresh_run(), "1182");
    flush_scripts(&url).await;
    let (loads, trips) = (store.script_loads(), store.round_trips());
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    assert_eq!(store.script_loads() - loads, 1, "the claim script, again");
    assert_eq!(
        store.round_trips() - trips,
        2,
        "NOSCRIPT, then the call again"
    );
    store.complete(&claim, done("1")).await.expect("complete");
    assert!(matches!(
        store.claim(request(&key, Duration::from_secs(30))).await,
        Ok(ClaimAnswer::Completed(_))
    ));
}

pub async fn waiting_for_zero_replicas_rides_in_the_same_round_trip() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url();
    let store = RedisStore::builder(url.as_str())
        .wait_for_replicas(0, Duration::from_millis(100))
        .connect()
        .await
        .expect("store");
    let key = refund_key(&fresh_run(), "1182");
    let before = store.round_trips();
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    store.complete(&claim, done("1")).await.expect("complete");
    assert_eq!(
        store.round_trips() - before,
        2,
        "WAIT rides with each script"
    );
    // A script the server forgot is loaded again behind a pipelined WAIT too.
    flush_scripts(&url).await;
    let (loads, before) = (store.script_loads(), store.round_trips());
    let other = refund_key(&fresh_run(), "1183");
    let claim = claimed(&store, request(&other, Duration::from_secs(30))).await;
    store.complete(&claim, done("2")).await.expect("complete");
    assert_eq!(
        store.script_loads() - loads,
        2,
        "the claim's script and the completion's, loaded again"
    );
    assert_eq!(
        store.round_trips() - before,
        4,
        "each step's NOSCRIPT, then the step again with its WAIT"
    );
}

async fn replicas(place: &Prefixed) -> u32 {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut admin(&place.url).await)
        .await
        .expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

pub async fn a_claim_short_of_its_replicas_is_released_and_reported_unavailable() {
    let Some(place) = Prefixed::new() else { return };
    let asked = replicas(&place).await + 1;
    let store = RedisStore::builder(place.url.as_str())
        .prefix(place.prefix.as_str())
        .wait_for_replicas(asked, Duration::from_millis(50))
        .connect()
        .await
        .expect("store");
    let key = refund_key(&fresh_run(), "1182");
    let err = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect_err("not enough replicas");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(
        error_chain(&err).join(": ").contains("replicas asked for"),
        "{err}"
    );
    assert!(
        place.keys().await.is_empty(),
        "the unreplicated claim was released"
    );
}

/// The suite races the same claims and checks each answer; here, what
/// they cost on the wire.
pub async fn racing_claims_from_many_connections_take_one_round_trip_each() {
    let Some(place) = Prefixed::new() else { return };
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(place.store().await));
    }
    let racing: Vec<Arc<dyn Store>> = stores
        .iter()
        .map(|store| store.clone() as Arc<dyn Store>)
        .collect();
    let run = fresh_run();
    let round_trips = || stores.iter().map(|s| s.round_trips()).sum::<u64>();
    let before = round_trips();
    let keys = 20;
    for order in 0..keys {
        kit::race_for_one_key(&racing, &refund_key(&run, &order.to_string())).await;
    }
    assert_eq!(
        round_trips() - before,
        (keys * kit::RACING_CLAIMS) as u64,
        "no claim needs a second round trip"
    );
}

pub async fn measured_latency_of_a_guarded_call_on_the_local_server() {
    let Some(place) = Prefixed::new() else { return };
    kit::measure_latency_of_a_guarded_call(Arc::new(place.store().await)).await;
}

pub async fn an_unreachable_server_is_unavailable_and_prints_each_cause_once() {
    let err = RedisStore::connect("redis://127.0.0.1:1/0")
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let messages = error_chain(&err);
    assert!(messages.len() >= 3, "{messages:?}");
    assert!(messages[1].contains("`connect`"), "{messages:?}");
    assert_each_cause_once(&messages);
}
