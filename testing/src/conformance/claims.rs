//! Claims between tasks of one process: identical calls act once, claims
//! racing from several connections are each answered as their tool and
//! arguments call for, distinct keys run in parallel, errors, panics and
//! dropped futures release the claim, other arguments and other tools
//! conflict, recorded results replay exactly.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;

use super::Case;
use super::case::{Subject, case};
use super::kit::{
    CountingProvider, Ends, Holder, RACING_CLAIMS, RefundError, Refunded, claimed, done, fresh_run,
    race_for_one_key, refund_call, refund_key, refunds, request, within,
};
use idempotent_tools::records::Records;
use idempotent_tools::{
    Error, Outcome,
    call::{Call, ConflictReason},
    store::{ClaimAnswer, Store},
};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(concurrent_identical_calls_act_once, [], |s| {
            concurrent_identical_calls_act_once(s.store, s.callers)
        }),
        case!(
            racing_claims_from_many_connections_check_tool_and_arguments_on_every_path,
            [],
            |s| racing_claims_from_many_connections_check_tool_and_arguments_on_every_path(s)
        ),
        case!(distinct_keys_run_in_parallel, []),
        case!(a_repeat_after_completion_replays_the_first_result, []),
        case!(a_replay_returns_the_recorded_value_exactly, []),
        case!(
            other_arguments_after_completion_conflict_with_the_first_result,
            []
        ),
        case!(other_arguments_in_flight_conflict_without_acting, []),
        case!(
            another_tool_with_the_same_key_conflicts_without_its_result,
            []
        ),
        case!(a_failed_record_replays_its_error_without_acting, []),
        case!(a_record_past_its_retention_is_acted_again, []),
        case!(a_purge_never_removes_a_held_claim, [PurgeJob], records),
        case!(the_action_sees_its_own_key, []),
        case!(a_holder_completing_again_is_answered_as_the_first_time, []),
    ]
}

/// The guard tries a completion again when its reply was lost: the same
/// holder completing again, at the same fence, is answered as the first
/// time, and what it recorded first stands.
async fn a_holder_completing_again_is_answered_as_the_first_time(store: Arc<dyn Store>) {
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let claim = claimed(&*store, request(&key, Duration::from_secs(30))).await;
    store.complete(&claim, done("1")).await.expect("complete");
    store
        .complete(&claim, done("1"))
        .await
        .expect("the same holder's completion, again, is accepted");
    match store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimAnswer::Completed(record) => {
            assert_eq!(record.value.to_json().expect("json"), "1");
        }
        other => panic!("expected the first result, got {other:?}"),
    }
}

async fn concurrent_identical_calls_act_once(store: Arc<dyn Store>, callers: usize) {
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let start = Arc::new(Barrier::new(callers));
    let mut tasks = Vec::with_capacity(callers);
    for _ in 0..callers {
        let (store, run, provider, start) =
            (store.clone(), run.clone(), provider.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            refund_call(&store, &run, "1182", 42)
                .run(async {
                    // Let the other callers reach their claim while this one
                    // is in flight.
                    for _ in 0..10 {
                        tokio::task::yield_now().await;
                    }
                    Ok::<_, RefundError>(provider.refund("1182", 42))
                })
                .await
        }));
    }
    let mut fresh = 0;
    let mut values = Vec::with_capacity(callers);
    for task in tasks {
        let outcome = within("a caller", task)
            .await
            .expect("task")
            .expect("outcome");
        fresh += usize::from(outcome.is_fresh());
        assert!(outcome.is_fresh() || outcome.is_replay(), "{outcome:?}");
        values.push(outcome.into_value().expect("value"));
    }
    assert_eq!(provider.refunds(), 1, "the action ran more than once");
    assert_eq!(fresh, 1, "exactly one caller must see a fresh result");
    assert!(
        values.iter().all(|v| *v == values[0]),
        "callers saw different results"
    );
}

/// Four connections (one for a store within one process), so that on a
/// server the claims race in the database, where a loser may find no row
/// yet.
async fn racing_claims_from_many_connections_check_tool_and_arguments_on_every_path(
    subject: Subject,
) {
    let connections = subject.connections(4).await;
    let sent = || connections.statements.as_ref().map(|count| count());
    let before = sent();
    let run = fresh_run();
    let keys = 40;
    for order in 0..keys {
        race_for_one_key(&connections.stores, &refund_key(&run, &order.to_string())).await;
    }
    if let (Some(after), Some(before)) = (sent(), before) {
        let claims = (keys * RACING_CLAIMS) as u64;
        let statements = after - before;
        println!(
            "measured: {claims} racing claims took {statements} statements \
             ({} retried after losing the race)",
            statements.saturating_sub(claims)
        );
    }
}

async fn distinct_keys_run_in_parallel(store: Arc<dyn Store>) {
    let run = fresh_run();
    let both_inside = Arc::new(Barrier::new(2));
    let call = |order: &'static str| {
        let (store, run, both_inside) = (store.clone(), run.clone(), both_inside.clone());
        tokio::spawn(async move {
            refund_call(&store, &run, order, 42)
                .run(async move {
                    // Passes only if the other action is running at the same time.
                    both_inside.wait().await;
                    Ok::<_, RefundError>(order.to_owned())
                })
                .await
        })
    };
    let (a, b) = (call("1"), call("2"));
    let (a, b) = within("two actions overlapping", async { (a.await, b.await) }).await;
    assert!(a.expect("task").expect("outcome").is_fresh());
    assert!(b.expect("task").expect("outcome").is_fresh());
}

async fn a_repeat_after_completion_replays_the_first_result(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("first");
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("again");
    assert_eq!(provider.refunds(), 1);
    assert!(first.is_fresh());
    match again {
        Outcome::Replay { value, note } => {
            assert_eq!(Some(&value), first.value());
            assert!(!note.is_empty());
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

async fn a_replay_returns_the_recorded_value_exactly(store: Arc<dyn Store>) {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Receipt {
        text: String,
        nested: Vec<Option<Vec<(u32, String)>>>,
        big: String,
        amount: i64,
    }
    let receipt = Receipt {
        text: "remboursé ✓ 退款 \u{1F4B8} \"quoted\" \\ back\nslash".into(),
        nested: vec![None, Some(vec![(1, "a".into()), (u32::MAX, "ü".into())])],
        big: "x".repeat(256 * 1024),
        amount: i64::MIN,
    };
    let run = fresh_run();
    let call = || Call::new("shop::receipt", refund_key(&run, "1182")).store(&store);
    let first = call()
        .run(async { Ok::<_, RefundError>(receipt.clone()) })
        .await
        .expect("first");
    let again = call()
        .run(async { must_not_act::<Receipt>() })
        .await
        .expect("again");
    assert!(first.is_fresh());
    assert!(again.is_replay());
    assert_eq!(again.into_value(), Some(receipt));
}

fn must_not_act<T>() -> Result<T, RefundError> {
    panic!("a replay must not act")
}

async fn other_arguments_after_completion_conflict_with_the_first_result(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("first");
    let other = refund_call(&store, &run, "1182", 41)
        .run(refunds(&provider, 41))
        .await
        .expect("second");
    assert_eq!(provider.refunds(), 1);
    match other {
        Outcome::Conflict {
            first: Some(value),
            reason: ConflictReason::Arguments,
            note,
        } => {
            assert_eq!(Some(&value), first.value());
            assert!(!note.is_empty());
        }
        other => panic!("expected a conflict carrying the first result, got {other:?}"),
    }
}

async fn other_arguments_in_flight_conflict_without_acting(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    let other = refund_call(&store, &run, "1182", 41)
        .run(refunds(&provider, 41))
        .await
        .expect("second");
    assert!(
        matches!(
            other,
            Outcome::Conflict {
                reason: ConflictReason::Arguments,
                ..
            }
        ),
        "{other:?}"
    );
    assert!(holder.finish().await.expect("first").is_fresh());
    assert_eq!(provider.refunds(), 1);
}

async fn another_tool_with_the_same_key_conflicts_without_its_result(store: Arc<dyn Store>) {
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let first = Call::new("shop::refund_order", key.clone())
        .store(&store)
        .run(async { Ok::<_, RefundError>("refund re_1".to_owned()) })
        .await
        .expect("first");
    assert!(first.is_fresh());
    let other = Call::new("mail::send_receipt", key)
        .store(&store)
        .run(async { Ok::<_, RefundError>("mail sent".to_owned()) })
        .await
        .expect("other");
    match other {
        Outcome::Conflict {
            first: None,
            reason: ConflictReason::OtherTool,
            ..
        } => {}
        other => panic!("expected a conflict without the other tool's result, got {other:?}"),
    }
}

async fn a_failed_record_replays_its_error_without_acting(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let attempt = || {
        refund_call(&store, &run, "1182", 42).run_recording_errors(async {
            provider.refund("1182", 42);
            Err::<Refunded, _>(RefundError::Declined("card declined".into()))
        })
    };
    let first = attempt().await;
    let again = attempt().await;
    assert_eq!(first, Err(RefundError::Declined("card declined".into())));
    assert_eq!(again, Err(RefundError::Declined("card declined".into())));
    assert_eq!(provider.refunds(), 1, "a recorded error is final");
}

async fn a_record_past_its_retention_is_acted_again(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    for _ in 0..2 {
        let outcome = refund_call(&store, &run, "1182", 42)
            .retention(Duration::ZERO)
            .run(refunds(&provider, 42))
            .await
            .expect("outcome");
        assert!(outcome.is_fresh());
    }
    assert_eq!(provider.refunds(), 2);
}

async fn a_purge_never_removes_a_held_claim(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42).retention(Duration::ZERO),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    records.purge_expired().await.expect("purge");
    let during = refund_call(&store, &run, "1182", 42)
        .wait(Duration::from_millis(100))
        .run(refunds(&provider, 42))
        .await;
    assert!(
        matches!(&during, Err(err) if matches!(err.guard(), Some(Error::InProgress { .. }))),
        "the held claim must survive the purge: {during:?}"
    );
    let _ = holder.finish().await.expect("first");
    assert_eq!(provider.refunds(), 1);
    assert!(records.purge_expired().await.expect("purge") >= 1);
}

async fn the_action_sees_its_own_key(store: Arc<dyn Store>) {
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let seen = Call::new("shop::refund_order", key.clone())
        .store(&store)
        .run(async { Ok::<_, RefundError>(idempotent_tools::current_key().map(|k| k.to_string())) })
        .await
        .expect("outcome");
    assert_eq!(seen.into_value().flatten(), Some(key.to_string()));
}
