//! An operator resolves what the guard cannot: an unknown outcome, or a
//! claim whose holder stopped mid-action, once the provider has said what
//! happened. As applied, every later call replays the provider's result;
//! as not applied, the next call acts once. A live claim, a known outcome
//! and a missing key are refused, and nothing changes. The provider takes
//! no key, so each case counts the refunds that reached it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Case;
use super::case::case;
use super::kit::{
    CountingProvider, RefundError, Refunded, claimed, done, fresh_run, not_offered, offered,
    refund_call, refund_key, refunds, request, usd,
};
use idempotent_tools::Run;
use idempotent_tools::call::Call;
use idempotent_tools::records::{RecordQuery, RecordState, Records, Resolution};
use idempotent_tools::store::{Completion, RecordValue, Store, StoreError};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            an_unknown_outcome_resolved_as_applied_replays_the_providers_result,
            [],
            records
        ),
        case!(
            an_unknown_outcome_resolved_as_not_applied_lets_the_next_call_act_once,
            [],
            records
        ),
        case!(
            a_claim_whose_lease_ran_out_is_resolved_and_its_holder_changes_nothing,
            [Leases],
            records
        ),
        case!(a_live_claim_is_not_resolved, [], records),
        case!(a_known_outcome_is_not_resolved, [], records),
        case!(a_key_with_no_record_is_not_resolved, [], records),
        case!(
            the_pending_keys_are_listed_with_why_and_leave_the_list_once_resolved,
            [],
            records
        ),
    ]
}

fn call(store: &Arc<dyn Store>, run: &Run) -> Call {
    refund_call(store, run, "1182", 42)
}

/// Leaves the refund of order 1182 unknown: the action times out, having
/// reached the provider if `reached`.
async fn unknown(store: &Arc<dyn Store>, run: &Run, provider: &CountingProvider, reached: bool) {
    let timed_out = call(store, run)
        .run_classified(async {
            if reached {
                provider.refund("1182", 42);
            }
            Err::<Refunded, _>(RefundError::TimedOut)
        })
        .await;
    assert_eq!(timed_out, Err(RefundError::TimedOut));
}

/// The error a resolve is refused with; a store that does not offer it
/// has the case ignored.
fn refused(resolved: Result<(), StoreError>) -> StoreError {
    match resolved {
        Ok(()) => panic!("the resolve was not refused"),
        Err(StoreError::Unsupported(step)) => not_offered(&format!("`{step}`")),
        Err(err) => err,
    }
}

fn both() -> [Resolution; 2] {
    [
        Resolution::Applied(RecordValue::from_json(
            r#"{"id":"re_9","order_id":"1182","usd":42}"#,
        )),
        Resolution::NotApplied,
    ]
}

async fn an_unknown_outcome_resolved_as_applied_replays_the_providers_result(
    records: Arc<dyn Records>,
) {
    let store: Arc<dyn Store> = records.clone();
    let (provider, run) = (CountingProvider::default(), fresh_run());
    unknown(&store, &run, &provider, true).await;
    let key = refund_key(&run, "1182");
    let before = offered(records.inspect(&key).await).expect("a record");
    assert_eq!(before.state, RecordState::Unknown);

    // The operator finds the refund at the provider.
    let found = provider.refund_of("1182").expect("the refund went out");
    offered(
        records
            .resolve(&key, Resolution::applied(found.clone()))
            .await,
    );

    let after = offered(records.inspect(&key).await).expect("a record");
    assert_eq!(after.state, RecordState::Done);
    assert!(after.fence > before.fence, "the fence is bumped");
    for _ in 0..2 {
        let again = call(&store, &run)
            .run_classified(refunds(&provider, 42))
            .await
            .expect("a replay");
        assert!(again.is_replay(), "{again:?}");
        assert_eq!(again.value(), Some(&found));
    }
    assert_eq!(provider.refunds(), 1, "no second refund");
    // The record is no longer unknown, so it is resolved only once.
    let twice = refused(records.resolve(&key, Resolution::NotApplied).await);
    assert!(
        matches!(
            twice,
            StoreError::NotUnknown {
                state: RecordState::Done,
                ..
            }
        ),
        "{twice:?}"
    );
}

async fn an_unknown_outcome_resolved_as_not_applied_lets_the_next_call_act_once(
    records: Arc<dyn Records>,
) {
    let store: Arc<dyn Store> = records.clone();
    let (provider, run) = (CountingProvider::default(), fresh_run());
    // The request never left: the provider has no refund.
    unknown(&store, &run, &provider, false).await;
    let key = refund_key(&run, "1182");
    offered(records.resolve(&key, Resolution::NotApplied).await);
    assert!(offered(records.inspect(&key).await).is_none());

    let next = call(&store, &run)
        .run_classified(refunds(&provider, 42))
        .await
        .expect("the next call");
    assert!(next.is_fresh(), "{next:?}");
    let again = call(&store, &run)
        .run_classified(refunds(&provider, 42))
        .await
        .expect("a replay");
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(provider.refunds(), 1, "the next call acted once");
}

async fn a_claim_whose_lease_ran_out_is_resolved_and_its_holder_changes_nothing(
    records: Arc<dyn Records>,
) {
    let store: Arc<dyn Store> = records.clone();
    let (provider, run) = (CountingProvider::default(), fresh_run());
    let key = refund_key(&run, "1182");
    // A holder refunds, then stops before it records anything.
    let holder = claimed(&*store, request(&key, Duration::ZERO)).await;
    let found = provider.refund("1182", 42);

    offered(
        records
            .resolve(&key, Resolution::applied(found.clone()))
            .await,
    );
    let late = store.complete(&holder, done("null")).await;
    assert!(matches!(late, Err(StoreError::LeaseLost)), "{late:?}");
    let again = call(&store, &run)
        .run_classified(refunds(&provider, 42))
        .await
        .expect("a replay");
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.value(), Some(&found));
    assert_eq!(provider.refunds(), 1, "no second refund");
}

async fn a_live_claim_is_not_resolved(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let holder = claimed(&*store, request(&key, Duration::from_secs(30))).await;
    for how in both() {
        let err = refused(records.resolve(&key, how).await);
        assert!(matches!(err, StoreError::LiveClaim { .. }), "{err:?}");
        assert!(err.to_string().contains("lease is live"), "{err}");
    }
    let record = offered(records.inspect(&key).await).expect("a record");
    assert_eq!(record.state, RecordState::Held);
    assert_eq!(record.owner, Some(holder.owner));
    assert_eq!(record.fence, holder.fence);
    // The holder still holds it, and records its result.
    let result = r#"{"id":"re_1","order_id":"1182","usd":42}"#;
    store
        .complete(&holder, done(result))
        .await
        .expect("complete");
    let record = offered(records.inspect(&key).await).expect("a record");
    assert_eq!(record.state, RecordState::Done);
}

async fn a_known_outcome_is_not_resolved(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let run = fresh_run();
    for (order, state) in [("1", RecordState::Done), ("2", RecordState::Failed)] {
        let key = refund_key(&run, order);
        let holder = claimed(&*store, request(&key, Duration::from_secs(30))).await;
        let completion = Completion {
            state,
            value: RecordValue::from_json(r#""kept""#),
            completed_at: SystemTime::now(),
        };
        store.complete(&holder, completion).await.expect("complete");
        for how in both() {
            let err = refused(records.resolve(&key, how).await);
            match &err {
                StoreError::NotUnknown {
                    key: text,
                    state: found,
                } => {
                    assert_eq!(text, key.as_str());
                    assert_eq!(*found, state);
                }
                other => panic!("expected NotUnknown, got {other:?}"),
            }
        }
        let record = offered(records.inspect(&key).await).expect("a record");
        assert_eq!(record.state, state);
        assert_eq!(record.fence, holder.fence);
        let kept = record.result.expect("a result");
        assert_eq!(kept.to_json().expect("json"), r#""kept""#);
    }
}

async fn a_key_with_no_record_is_not_resolved(records: Arc<dyn Records>) {
    let key = refund_key(&fresh_run(), "1182");
    for how in both() {
        let err = refused(records.resolve(&key, how).await);
        assert!(matches!(err, StoreError::NoRecord { .. }), "{err:?}");
        assert!(err.to_string().contains(key.as_str()), "{err}");
    }
    assert!(offered(records.inspect(&key).await).is_none());
}

/// The keys `RecordQuery::pending` lists for one run: their text.
async fn pending(records: &Arc<dyn Records>, run: &Run) -> Vec<String> {
    let page = offered(
        records
            .list(&RecordQuery::pending().run(run.as_str()))
            .await,
    );
    page.records
        .iter()
        .map(|record| record.key.as_str().to_owned())
        .collect()
}

async fn the_pending_keys_are_listed_with_why_and_leave_the_list_once_resolved(
    records: Arc<dyn Records>,
) {
    let store: Arc<dyn Store> = records.clone();
    let (provider, run) = (CountingProvider::default(), fresh_run());
    // Order 1182's refund reached the provider, 1183's did not; both timed
    // out. Order 1184's is known.
    unknown(&store, &run, &provider, true).await;
    let timed_out = refund_call(&store, &run, "1183", 42)
        .run_classified(async { Err::<Refunded, _>(RefundError::TimedOut) })
        .await;
    assert_eq!(timed_out, Err(RefundError::TimedOut));
    let known = refund_call(&store, &run, "1184", 42)
        .run_classified(async { Ok::<_, RefundError>(provider.refund("1184", 42)) })
        .await
        .expect("a refund");
    assert!(known.is_fresh(), "{known:?}");
    let (first, second) = (refund_key(&run, "1182"), refund_key(&run, "1183"));
    assert_eq!(
        pending(&records, &run).await,
        [first.as_str(), second.as_str()]
    );

    // What an operator needs to know of each.
    let page = offered(
        records
            .list(&RecordQuery::pending().run(run.as_str()))
            .await,
    );
    for record in &page.records {
        assert_eq!(record.state, RecordState::Unknown);
        assert_eq!(record.fingerprint, usd(42), "the arguments' fingerprint");
        assert_eq!(record.fence, 1, "tried once");
        assert!(record.completed_at.is_some(), "when: {record:?}");
        assert_eq!(
            record.why().as_deref(),
            Some("the action failed in a way that may have taken effect")
        );
        assert_eq!(record.last_error(), Some(RefundError::TimedOut.to_string()));
    }
    let known = offered(records.inspect(&refund_key(&run, "1184")).await).expect("a record");
    assert_eq!((known.why(), known.last_error()), (None, None));

    // As the provider says: 1182 went out, checked against the tool's
    // result type; 1183 did not.
    let found = provider.refund_of("1182").expect("the refund went out");
    let json = serde_json::to_string(&found).expect("json");
    let applied = Resolution::applied_json::<Refunded>(&json).expect("a refund");
    offered(records.resolve(&first, applied).await);
    assert_eq!(pending(&records, &run).await, [second.as_str()]);
    offered(records.resolve(&second, Resolution::NotApplied).await);
    assert_eq!(pending(&records, &run).await, Vec::<String>::new());

    let replayed = call(&store, &run)
        .run_classified(refunds(&provider, 42))
        .await
        .expect("a replay");
    assert!(replayed.is_replay(), "{replayed:?}");
    assert_eq!(replayed.value(), Some(&found));
    let acted = refund_call(&store, &run, "1183", 42)
        .run_classified(async { Ok::<_, RefundError>(provider.refund("1183", 42)) })
        .await
        .expect("the next call");
    assert!(acted.is_fresh(), "{acted:?}");
    assert_eq!(provider.refunds(), 3, "1182 and 1184 once, then 1183 once");
}
