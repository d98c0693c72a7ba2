//! What only the Redis store does: its key layout, retention by key expiry
//! and the eviction warning here; its steps on the wire in [`wire`]; a
//! holder cut off from the server mid-action in [`partition`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotent_tools::RedisStore;
use idempotent_tools::store::redis::redis;
use idempotent_tools::{
    records::{RecordState, Records},
    store::{ClaimAnswer, ClaimRequest, Store},
};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::SubscriberExt;

use crate::harness::Trial;
use crate::{Prefixed, URL, admin};
use idempotent_tools_testing::conformance::kit::{
    self, CountingProvider as Provider, Ends, Holder, claimed, done, fresh_run, refund_call,
    refund_key, refunds, request,
};

mod batch;
mod partition;
pub mod restart;
mod wire;

use self::wire::*;

pub fn trials() -> Vec<Trial> {
    let mut trials = crate::trials!(URL;
        keys_carry_the_prefix_and_a_hash_tag_of_the_keys_digest,
        retention_is_the_records_time_to_live_and_a_purge_has_nothing_to_remove,
        a_held_claim_outlives_a_zero_retention_until_it_finishes,
        a_waiter_is_woken_by_one_publish_and_a_completion_nobody_waits_for_publishes_none,
        a_lost_wake_up_delays_a_waiter_by_at_most_the_recheck,
        a_claim_short_of_its_replicas_is_released_and_reported_unavailable,
        racing_claims_from_many_connections_take_one_round_trip_each,
        measured_latency_of_a_guarded_call_on_the_local_server,
        a_record_in_the_former_layout_replays_and_reads_in_todays_words,
        a_claim_the_server_refuses_is_a_backend_error_and_nothing_runs,
        batch::each_caller_in_a_coalesced_pipeline_gets_its_own_answer,
        batch::many_guarded_calls_coalesced_act_once_per_key,
        batch::a_script_that_fails_for_one_caller_fails_only_that_caller,
        batch::a_caller_dropped_while_queued_or_on_the_wire_leaves_no_claim,
        batch::a_pipeline_whose_connection_breaks_goes_again_together_not_one_by_one,
        partition::a_holder_cut_off_mid_action_loses_its_claim_and_the_provider_refunds_once,
        partition::a_holder_cut_off_mid_action_leaves_the_outcome_unknown_under_report_unknown,
        partition::a_holder_cut_off_mid_action_is_verified_where_the_provider_takes_no_key,
    );
    trials.extend(crate::trials!(always;
        an_unreachable_server_is_unavailable_and_prints_each_cause_once,
    ));
    // On a `redis-server` of the test's own: the restart cases, and those
    // that change what is the whole server's (its script cache, its
    // eviction policy), which the cases beside them on the shared server
    // would see.
    let server = ("redis-server", restart::Server::can_start());
    trials.extend(crate::trials!(URL, server;
        an_evicting_policy_is_warned_about_on_connect_and_noeviction_is_not,
        a_script_the_server_forgot_is_loaded_again_and_the_step_goes_through,
        waiting_for_zero_replicas_rides_in_the_same_round_trip,
        restart::a_call_dropped_while_its_steps_retry_leaves_no_claim_stuck_and_no_result_lost,
        restart::a_completion_whose_server_stays_down_past_the_lease_is_not_recorded_and_says_the_action_ran,
    ));
    trials.extend(
        crate::trials!(URL, server; restart::measured_first_calls_after_a_restart)
            .into_iter()
            .map(|trial| trial.with_ignored_flag(true)),
    );
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
    store.complete(&claim, done("1")).await.expect("complete");
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

    store.complete(&held, done("1")).await.expect("complete");
    let ttl = pttl(&place, &store.record_key(&held_key)).await;
    assert!(
        (3_590_000..=hour.as_millis() as i64).contains(&ttl),
        "a completed record lives its retention: {ttl} ms"
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
        store.complete(&claim, done("2")).await.expect("complete");
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

async fn connect_hearing_warnings(url: &str) -> (RedisStore, Vec<String>) {
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    let store = RedisStore::connect(url)
        .with_subscriber(subscriber)
        .await
        .expect("a store");
    let heard = warnings.0.lock().expect("warnings").clone();
    (store, heard)
}

async fn an_evicting_policy_is_warned_about_on_connect_and_noeviction_is_not() {
    let Some(server) = restart::Server::start() else {
        return;
    };
    let url = server.url();
    let admin = admin(&url).await;
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
    let (store, heard) = connect_hearing_warnings(&url).await;
    set("noeviction").await;
    let (quiet, unheard) = connect_hearing_warnings(&url).await;

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

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A record written before the state had one word per value (`state` done,
/// how it ended in `ending`, its time in `finished_at`) still replays, reads
/// in today's words, and blocks a repeat of a failed action.
async fn a_record_in_the_former_layout_replays_and_reads_in_todays_words() {
    let Some(place) = Prefixed::new() else { return };
    let store = place.store().await;
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    store.complete(&claim, done("1")).await.expect("complete");
    let record = store.record_key(&key);
    let former = |ending: &'static str| {
        let (url, record) = (place.url.clone(), record.clone());
        async move {
            let _: () = redis::pipe()
                .cmd("HSET")
                .arg(&record)
                .arg(&["state", "done", "ending", ending])
                .arg(&["finished_at", "1700000000000"])
                .cmd("HDEL")
                .arg(&record)
                .arg("completed_at")
                .query_async(&mut admin(&url).await)
                .await
                .expect("the former layout");
        }
    };
    former("ok").await;
    assert!(matches!(
        store.claim(request(&key, Duration::from_secs(30))).await,
        Ok(ClaimAnswer::Completed(completion)) if completion.state == RecordState::Done
    ));
    let read = store
        .inspect(&key)
        .await
        .expect("inspect")
        .expect("a record");
    assert_eq!(read.state, RecordState::Done);
    assert!(read.completed_at.is_some());

    // The same record, as the former layout wrote a failed action.
    former("err").await;
    assert!(matches!(
        store.claim(request(&key, Duration::from_secs(30))).await,
        Ok(ClaimAnswer::Completed(completion)) if completion.state == RecordState::Failed
    ));
    let read = store
        .inspect(&key)
        .await
        .expect("inspect")
        .expect("a record");
    assert_eq!(read.state, RecordState::Failed);
}

/// The server refuses the claim script (its record's key holds a string,
/// which a script that reads a hash cannot): an error of the server's own,
/// and nothing runs.
async fn a_claim_the_server_refuses_is_a_backend_error_and_nothing_runs() {
    let Some(place) = Prefixed::new() else { return };
    let store = place.store().await;
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let _: () = redis::cmd("SET")
        .arg(store.record_key(&key))
        .arg("not a hash")
        .query_async(&mut admin(&place.url).await)
        .await
        .expect("set");
    let store: Arc<dyn Store> = Arc::new(store);
    kit::refused_by_the_server(&store, &run, &Provider::default()).await;
}
