//! What only the Redis store does: its key layout, retention by key expiry,
//! the eviction warning, wake-ups published only for a waiter, scripts
//! reloaded after the server forgot them, `WAIT`, and its errors.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use idempotent_tools::store::RedisStore;
use idempotent_tools::store::redis::redis;
use idempotent_tools::{ClaimAnswer, ClaimRequest, ConflictReason, Store, StoreError, ToolId};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::SubscriberExt;

use crate::adversarial::{
    Ends, Holder, Provider, fresh_run, refund_call, refund_key, refunds, usd,
};
use crate::durable::{self, TOOL, claimed, finished, in_flight, request};
use crate::harness::Trial;
use crate::{Prefixed, URL, admin};

pub fn trials() -> Vec<Trial> {
    let mut trials = crate::trials!(URL;
        keys_carry_the_prefix_and_a_hash_tag_of_the_keys_digest,
        retention_is_the_records_time_to_live_and_a_purge_has_nothing_to_remove,
        a_held_claim_outlives_a_zero_retention_until_it_finishes,
        an_evicting_policy_is_warned_about_on_connect_and_noeviction_is_not,
        a_waiter_is_woken_by_one_publish_and_a_completion_nobody_waits_for_publishes_none,
        a_script_the_server_forgot_is_loaded_again_and_the_step_goes_through,
        waiting_for_zero_replicas_rides_in_the_same_round_trip,
        a_claim_short_of_its_replicas_is_released_and_reported_unavailable,
        racing_claims_from_many_connections_take_one_round_trip_each,
        measured_latency_of_a_guarded_call_on_the_local_server,
    );
    trials.extend(crate::trials!(always;
        an_unreachable_server_is_unavailable_and_prints_each_cause_once,
    ));
    trials
}

async fn keys_carry_the_prefix_and_a_hash_tag_of_the_keys_digest() {
    let Some(place) = Prefixed::new() else { return };
    let store = place.store().await;
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    let expected = format!("{}{{{}}}", place.prefix, hex(&key.digest()));
    assert_eq!(store.record_key(&key), expected);
    assert_eq!(
        place.keys().await,
        std::slice::from_ref(&expected),
        "one key per claim"
    );
    // The hash tag is everything between the braces: one Cluster slot.
    let tag = &expected[expected.find('{').expect("{") + 1..expected.find('}').expect("}")];
    assert_eq!(tag, hex(&key.digest()));
    assert_eq!(store.wake_channel(), format!("{}wake", place.prefix));
    store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    assert_eq!(
        place.keys().await,
        [expected],
        "the record stays at its key"
    );
}

async fn pttl(place: &Prefixed, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut admin(&place.url).await)
        .await
        .expect("pttl")
}

async fn retention_is_the_records_time_to_live_and_a_purge_has_nothing_to_remove() {
    let Some(place) = Prefixed::new() else { return };
    let store = place.store().await;
    let run = fresh_run();
    let hour = Duration::from_secs(3600);

    let held_key = refund_key(&run, "held");
    let held = claimed(&store, request(&held_key, Duration::from_secs(30))).await;
    let ttl = pttl(&place, &store.record_key(&held_key)).await;
    assert!(
        (3_620_000..=3_630_000).contains(&ttl),
        "a held claim lives its lease and then its retention: {ttl} ms"
    );

    store
        .complete(&held, finished("1"))
        .await
        .expect("complete");
    let ttl = pttl(&place, &store.record_key(&held_key)).await;
    assert!(
        (3_590_000..=hour.as_millis() as i64).contains(&ttl),
        "a finished record lives its retention: {ttl} ms"
    );

    for order in 0..5 {
        let key = refund_key(&run, &order.to_string());
        let claim = claimed(
            &store,
            ClaimRequest {
                retention: Duration::ZERO,
                ..request(&key, Duration::from_secs(30))
            },
        )
        .await;
        store
            .complete(&claim, finished("2"))
            .await
            .expect("complete");
        assert_eq!(
            pttl(&place, &store.record_key(&key)).await,
            -2,
            "gone at once"
        );
        assert!(store.inspect(&key).await.expect("inspect").is_none());
    }

    let before = store.round_trips();
    assert_eq!(store.purge_expired().await.expect("purge"), 0);
    assert_eq!(store.round_trips(), before, "a purge sends nothing");
    assert!(matches!(
        store
            .claim(request(&held_key, Duration::from_secs(30)))
            .await,
        Ok(ClaimAnswer::Completed(_))
    ));
}

async fn a_held_claim_outlives_a_zero_retention_until_it_finishes() {
    let Some(place) = Prefixed::new() else { return };
    let store: Arc<dyn Store> = Arc::new(place.store().await);
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42).retention(Duration::ZERO),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    let during = refund_call(&store, &run, "1182", 42)
        .wait(Duration::from_millis(100))
        .run(refunds(&provider, 42))
        .await;
    assert!(
        matches!(&during, Err(err) if matches!(err.guard(), Some(idempotent_tools::Error::InProgress { .. }))),
        "the held claim must live through a zero retention: {during:?}"
    );
    assert!(holder.finish().await.expect("first").is_fresh());
    assert!(
        place.keys().await.is_empty(),
        "finished with zero retention: gone"
    );
    assert_eq!(provider.refunds(), 1);
}

/// Every warning a future's subscriber hears.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = String::new();
        event.record(&mut Message(&mut text));
        self.0.lock().expect("warnings").push(text);
    }
}

async fn connect_hearing_warnings(place: &Prefixed) -> (RedisStore, Vec<String>) {
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    let store = place.store().with_subscriber(subscriber).await;
    let heard = warnings.0.lock().expect("warnings").clone();
    (store, heard)
}

async fn an_evicting_policy_is_warned_about_on_connect_and_noeviction_is_not() {
    let Some(place) = Prefixed::new() else { return };
    let mut admin = admin(&place.url).await;
    let was: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut admin)
        .await
        .expect("config get");
    let was = was.get(1).cloned().unwrap_or_else(|| "noeviction".into());
    let set = |policy: &'static str| {
        let mut admin = admin.clone();
        async move {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(policy)
                .query_async(&mut admin)
                .await
                .expect("config set");
        }
    };
    // With `maxmemory` unset nothing is evicted whatever the policy: the
    // policy is only read.
    set("allkeys-lru").await;
    let (store, heard) = connect_hearing_warnings(&place).await;
    set("noeviction").await;
    let (quiet, unheard) = connect_hearing_warnings(&place).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(&was)
        .query_async(&mut admin)
        .await
        .expect("restore");

    assert_eq!(store.eviction_policy(), Some("allkeys-lru"));
    assert!(
        heard
            .iter()
            .any(|w| w.contains("allkeys-lru") && w.contains("noeviction")),
        "{heard:?}"
    );
    assert_eq!(quiet.eviction_policy(), Some("noeviction"));
    assert!(
        !unheard.iter().any(|w| w.contains("maxmemory-policy")),
        "{unheard:?}"
    );
}

async fn a_waiter_is_woken_by_one_publish_and_a_completion_nobody_waits_for_publishes_none() {
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
    holder
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
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
    holder
        .complete(&claim, finished("2"))
        .await
        .expect("complete");
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

async fn a_script_the_server_forgot_is_loaded_again_and_the_step_goes_through() {
    let Some(place) = Prefixed::new() else { return };
    let store = place.store().await;
    let key = refund_key(&fresh_run(), "1182");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin(&place.url).await)
        .await
        .expect("script flush");
    let (loads, trips) = (store.script_loads(), store.round_trips());
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    assert!(
        store.script_loads() > loads,
        "the claim script was loaded again"
    );
    assert!(
        store.round_trips() - trips >= 2,
        "NOSCRIPT, then the call again"
    );
    store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    assert!(matches!(
        store.claim(request(&key, Duration::from_secs(30))).await,
        Ok(ClaimAnswer::Completed(_))
    ));
}

async fn waiting_for_zero_replicas_rides_in_the_same_round_trip() {
    let Some(place) = Prefixed::new() else { return };
    let store = RedisStore::builder(place.url.as_str())
        .prefix(place.prefix.as_str())
        .wait_for_replicas(0, Duration::from_millis(100))
        .connect()
        .await
        .expect("store");
    let key = refund_key(&fresh_run(), "1182");
    let before = store.round_trips();
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    assert_eq!(
        store.round_trips() - before,
        2,
        "WAIT rides with each script"
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

async fn a_claim_short_of_its_replicas_is_released_and_reported_unavailable() {
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
        chain(&err).join(": ").contains("replicas asked for"),
        "{err}"
    );
    assert!(
        place.keys().await.is_empty(),
        "the unreplicated claim was released"
    );
}

async fn racing_claims_from_many_connections_take_one_round_trip_each() {
    let Some(place) = Prefixed::new() else { return };
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(place.store().await));
    }
    let run = fresh_run();
    let before: u64 = stores.iter().map(|s| s.round_trips()).sum();
    let mut claims = 0;
    for order in 0..20 {
        let key = refund_key(&run, &order.to_string());
        let start = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = Vec::new();
        for caller in 0..8usize {
            let (store, key, start) = (stores[caller % 4].clone(), key.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                let tool = if caller % 4 == 3 {
                    ToolId::new("mail::send_receipt")
                } else {
                    TOOL.clone()
                };
                let fingerprint = usd(if caller % 2 == 0 { 42 } else { 41 });
                start.wait().await;
                let answer = store
                    .claim(ClaimRequest {
                        key: &key,
                        tool: &tool,
                        fingerprint,
                        lease: Duration::from_secs(30),
                        retention: Duration::from_secs(3600),
                    })
                    .await
                    .expect("claim");
                (tool, fingerprint, answer)
            }));
        }
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("task"));
        }
        claims += results.len() as u64;
        let winners: Vec<_> = results
            .iter()
            .filter(|(_, _, a)| matches!(a, ClaimAnswer::Claimed(_)))
            .collect();
        assert_eq!(winners.len(), 1, "exactly one claim per key");
        let (win_tool, win_fp, _) = winners[0];
        for (tool, fp, answer) in &results {
            match answer {
                ClaimAnswer::Claimed(_) => {}
                ClaimAnswer::InFlight(_) => assert!(tool == win_tool && fp == win_fp),
                ClaimAnswer::Conflict {
                    reason: ConflictReason::OtherTool,
                    ..
                } => assert!(tool != win_tool),
                ClaimAnswer::Conflict {
                    reason: ConflictReason::Arguments,
                    ..
                } => assert!(tool == win_tool && fp != win_fp),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let trips = stores.iter().map(|s| s.round_trips()).sum::<u64>() - before;
    assert_eq!(trips, claims, "no claim needs a second round trip");
}

async fn measured_latency_of_a_guarded_call_on_the_local_server() {
    let Some(place) = Prefixed::new() else { return };
    durable::measure_latency_of_a_guarded_call(place.store().await).await;
}

/// The messages of an error and its sources, outermost first.
fn chain(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut messages = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        messages.push(cause.to_string());
        source = cause.source();
    }
    messages
}

async fn an_unreachable_server_is_unavailable_and_prints_each_cause_once() {
    let err = RedisStore::connect("redis://127.0.0.1:1/0")
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let messages = chain(&err);
    assert!(messages.len() >= 3, "{messages:?}");
    assert!(messages[1].contains("`connect`"), "{messages:?}");
    for pair in messages.windows(2) {
        assert!(
            !pair[0].contains(&pair[1]),
            "`{}` repeats its cause `{}`",
            pair[0],
            pair[1]
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
