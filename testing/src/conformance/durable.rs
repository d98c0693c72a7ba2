//! The promises of a store that outlives the process: one statement per
//! step, replays byte for byte, long keys, purging (in batches, and while
//! expired keys are claimed again), expiry, and forgetting.

use std::sync::Arc;
use std::time::Duration;

use super::Case;
use super::PURGE_BATCH;
use super::case::{Statements, case};
use super::kit::{
    CountingProvider, RefundError, claimed, done, fresh_run, offered, refund_call, refund_key,
    refunds, request, within,
};
use idempotent_tools::records::{RecordState, Records};
use idempotent_tools::{
    Error,
    call::{Call, Key},
    store::{ClaimAnswer, ClaimRequest, Store, StoreError},
};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records,
            [BatchPurge, PurgeJob],
            |s| a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records(
                s.records(),
                s.statements
            )
        ),
        case!(
            a_fresh_claim_a_completion_and_a_replay_take_one_statement_each,
            [Statements],
            |s| a_fresh_claim_a_completion_and_a_replay_take_one_statement_each(
                s.store.clone(),
                s.statements()
            )
        ),
        case!(a_replay_is_byte_identical_to_the_recorded_json, []),
        case!(a_key_of_a_hundred_kilobytes_is_claimed_and_replayed, []),
        case!(
            purging_while_expired_keys_are_claimed_again_never_acts_twice,
            [PurgeJob],
            records
        ),
        case!(
            forgetting_removes_a_finished_record_but_never_a_live_claim,
            [],
            records
        ),
        case!(
            a_result_that_cannot_be_stored_faithfully_is_refused_before_any_replay,
            []
        ),
        case!(
            a_finished_record_past_its_retention_vanishes_without_a_purge,
            [Expiry],
            records
        ),
    ]
}

async fn a_fresh_claim_a_completion_and_a_replay_take_one_statement_each(
    store: Arc<dyn Store>,
    statements: Statements,
) {
    let key = refund_key(&fresh_run(), "1182");

    let before = statements();
    let claim = claimed(&*store, request(&key, Duration::from_secs(30))).await;
    assert_eq!(statements() - before, 1, "a fresh claim");

    let before = statements();
    store
        .complete(&claim, done(r#"{"id":"re_1"}"#))
        .await
        .expect("complete");
    assert_eq!(statements() - before, 1, "a completion");

    let before = statements();
    let replay = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(replay, ClaimAnswer::Completed(_)), "{replay:?}");
    assert_eq!(statements() - before, 1, "a replay");

    let other = refund_key(&fresh_run(), "1183");
    let claim = claimed(&*store, request(&other, Duration::from_secs(30))).await;
    let before = statements();
    let in_flight = store
        .claim(request(&other, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(in_flight, ClaimAnswer::InFlight(_)));
    assert_eq!(statements() - before, 1, "a claim that finds one in flight");
    let before = statements();
    store.release(&claim).await.expect("release");
    assert_eq!(statements() - before, 1, "a release");
}

async fn a_replay_is_byte_identical_to_the_recorded_json(store: Arc<dyn Store>) {
    let key = refund_key(&fresh_run(), "1182");
    // Spacing, key order, escapes and number forms that a parse and
    // re-serialisation would change.
    let big = "é".repeat(300_000);
    let json = format!(
        "{{ \"z\" : 1.50, \"a\": [ {{\"nested\": {{\"deep\": [null, true, \"\\u00e9\\n\"]}}}} ], \
         \"emoji\": \"\u{1F4B8}\", \"big\": \"{big}\" }}"
    );
    let claim = claimed(&*store, request(&key, Duration::from_secs(30))).await;
    store.complete(&claim, done(&json)).await.expect("complete");
    match store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimAnswer::Completed(done) => {
            assert_eq!(done.state, RecordState::Done);
            assert!(done.value.to_json().expect("json") == json.as_str());
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

async fn a_key_of_a_hundred_kilobytes_is_claimed_and_replayed(store: Arc<dyn Store>) {
    let long = "k".repeat(100 * 1024);
    let key = Key::builder()
        .part("run", &fresh_run())
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("order_id", &long))
        .and_then(|b| b.finish())
        .expect("key");
    let provider = CountingProvider::default();
    for _ in 0..2 {
        let _ = Call::new("shop::refund_order", key.clone())
            .store(&store)
            .run(refunds(&provider, 42))
            .await
            .expect("outcome");
    }
    assert_eq!(provider.refunds(), 1);
}

/// `store` must purge at most [`PURGE_BATCH`] rows per statement.
async fn a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records(
    records: Arc<dyn Records>,
    statements: Option<Statements>,
) {
    let store: Arc<dyn Store> = records.clone();
    let run = fresh_run();
    for order in 0..25 {
        let key = refund_key(&run, &order.to_string());
        let claim = claimed(
            &*store,
            ClaimRequest {
                retention: Duration::ZERO,
                ..request(&key, Duration::from_secs(30))
            },
        )
        .await;
        store.complete(&claim, done("1")).await.expect("complete");
    }
    let held_key = refund_key(&run, "held");
    let held = claimed(
        &*store,
        ClaimRequest {
            retention: Duration::ZERO,
            ..request(&held_key, Duration::from_secs(30))
        },
    )
    .await;
    let live_key = refund_key(&run, "live");
    let live = claimed(&*store, request(&live_key, Duration::from_secs(30))).await;
    store.complete(&live, done("2")).await.expect("complete");

    let before = statements.as_ref().map(|count| count());
    assert_eq!(records.purge_expired().await.expect("purge"), 25);
    if let (Some(count), Some(before)) = (&statements, before) {
        assert_eq!(count() - before, 3, "25 rows in batches of {PURGE_BATCH}");
    }

    assert!(matches!(
        store
            .claim(request(&held_key, Duration::from_secs(30)))
            .await,
        Ok(ClaimAnswer::InFlight(_))
    ));
    assert!(matches!(
        store
            .claim(request(&live_key, Duration::from_secs(30)))
            .await,
        Ok(ClaimAnswer::Completed(_))
    ));
    store.complete(&held, done("3")).await.expect("complete");
}

async fn purging_while_expired_keys_are_claimed_again_never_acts_twice(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let orders = 50;
    for order in 0..orders {
        let _ = refund_call(&store, &run, &order.to_string(), 42)
            .retention(Duration::ZERO)
            .run(async { Ok::<_, RefundError>(provider.refund("x", 42)) })
            .await
            .expect("first round");
    }
    assert_eq!(provider.refunds(), orders);
    // Every record has expired: each key acts exactly once more, however the
    // purges and the duplicates interleave.
    let purger = {
        let records = records.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                records.purge_expired().await.expect("purge");
                tokio::task::yield_now().await;
            }
        })
    };
    let mut calls = Vec::new();
    for order in 0..orders {
        for _ in 0..2 {
            let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
            calls.push(tokio::spawn(async move {
                refund_call(&store, &run, &order.to_string(), 42)
                    .run(async { Ok::<_, RefundError>(provider.refund("x", 42)) })
                    .await
            }));
        }
    }
    for call in calls {
        let _ = call.await.expect("task").expect("second round");
    }
    purger.await.expect("purger");
    assert_eq!(provider.refunds(), 2 * orders);
}

async fn forgetting_removes_a_finished_record_but_never_a_live_claim(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let run = fresh_run();
    let done_key = refund_key(&run, "done");
    let claim = claimed(&*store, request(&done_key, Duration::from_secs(30))).await;
    store.complete(&claim, done("1")).await.expect("complete");
    let held_key = refund_key(&run, "held");
    let held = claimed(&*store, request(&held_key, Duration::from_secs(30))).await;

    assert!(offered(records.forget(&done_key).await));
    assert!(matches!(
        records.forget(&held_key).await,
        Err(StoreError::LiveClaim { .. })
    ));
    claimed(&*store, request(&done_key, Duration::from_secs(30))).await;
    store.complete(&held, done("2")).await.expect("complete");
}

async fn a_result_that_cannot_be_stored_faithfully_is_refused_before_any_replay(
    store: Arc<dyn Store>,
) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let measure = || async {
        provider.refund("1182", 42);
        Ok::<_, RefundError>(f64::NAN)
    };
    let first = refund_call(&store, &run, "1182", 42).run(measure()).await;
    let first = match first {
        // A store that keeps values as they are (in memory) keeps a NaN
        // faithfully: it must replay it, not act again.
        Ok(first) => {
            assert!(first.is_fresh(), "{first:?}");
            let again = refund_call(&store, &run, "1182", 42)
                .run(measure())
                .await
                .expect("a replay");
            assert!(again.into_value().is_some_and(f64::is_nan));
            assert_eq!(provider.refunds(), 1);
            return;
        }
        // One that stores JSON stores a NaN as null, which reads back as no
        // number: it must refuse the result before any replay.
        Err(first) => first,
    };
    match first.guard() {
        Some(Error::NotRecorded { cause, .. }) => {
            assert!(matches!(cause, StoreError::Unrecordable(_)), "{cause:?}")
        }
        other => panic!("expected NotRecorded, got {other:?}"),
    }
    assert_eq!(first.guard().and_then(Error::action_ran), Some(true));
    // Kept as an unknown outcome: no later call runs it again, nor
    // trips over a record it cannot read.
    let again = refund_call(&store, &run, "1182", 42)
        .run(measure())
        .await
        .expect_err("an unknown outcome");
    assert!(
        matches!(again.guard(), Some(Error::UnknownOutcome { .. })),
        "{again:?}"
    );
    assert_eq!(provider.refunds(), 1);
}

async fn a_finished_record_past_its_retention_vanishes_without_a_purge(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(
        &*store,
        ClaimRequest {
            retention: Duration::from_millis(1),
            ..request(&key, Duration::from_secs(30))
        },
    )
    .await;
    store.complete(&claim, done("1")).await.expect("complete");
    // Expiry is the store's clock at work, not a synchronisation: look
    // again until the record is gone, for at most PATIENCE.
    within("the record's expiry", async {
        while offered(records.inspect(&key).await).is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    claimed(&*store, request(&key, Duration::from_secs(30))).await;
}
