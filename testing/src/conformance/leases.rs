//! Leases and fences: a claim whose lease ran out is taken over with a
//! higher fence, and its stale holder changes nothing; renewals keep a live
//! holder's claim, every third of a lease, while a long action runs.

use std::sync::Arc;
use std::time::Duration;

use super::Case;
use super::case::case;
use super::kit::{
    CountingProvider, Ends, Holder, claimed, done, fresh_run, refund_call, refund_key, refunds,
    request, usd,
};
use idempotent_tools::{
    Error,
    call::ConflictReason,
    store::{ClaimAnswer, ClaimRequest, Store, StoreError},
};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            a_claim_past_its_lease_is_taken_over_with_a_higher_fence_and_the_stale_holder_changes_nothing,
            [Leases]
        ),
        case!(a_lease_that_ran_out_is_not_taken_over_by_other_arguments, [Leases]),
        case!(renewing_a_lease_keeps_the_claim_from_being_taken_over, [Leases]),
        case!(leases_are_renewed_every_third_of_a_lease, [Leases]),
        case!(the_guard_renews_the_lease_while_a_long_action_runs, [Leases]),
    ]
}

async fn a_claim_past_its_lease_is_taken_over_with_a_higher_fence_and_the_stale_holder_changes_nothing(
    store: Arc<dyn Store>,
) {
    let key = refund_key(&fresh_run(), "1182");
    // A zero lease has run out the moment it is written: the holder stands
    // for one whose process died.
    let stale = claimed(&*store, request(&key, Duration::ZERO)).await;
    assert!(!stale.taken_over);

    let current = claimed(&*store, request(&key, Duration::from_secs(30))).await;
    assert!(current.taken_over, "the new holder must know it took over");
    assert!(current.fence > stale.fence, "a takeover bumps the fence");
    assert_ne!(current.owner, stale.owner);

    assert!(matches!(
        store.renew(&stale, Duration::from_secs(30)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.complete(&stale, done(r#""stale""#)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&stale).await,
        Err(StoreError::LeaseLost)
    ));

    store
        .complete(&current, done(r#""current""#))
        .await
        .expect("the current holder completes");
    match store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimAnswer::Completed(done) => {
            assert_eq!(done.value.to_json().expect("json"), r#""current""#)
        }
        other => panic!("expected the current holder's result, got {other:?}"),
    }
}

async fn a_lease_that_ran_out_is_not_taken_over_by_other_arguments(store: Arc<dyn Store>) {
    let key = refund_key(&fresh_run(), "1182");
    let crashed = claimed(&*store, request(&key, Duration::ZERO)).await;
    let other = store
        .claim(ClaimRequest {
            fingerprint: usd(41),
            ..request(&key, Duration::from_secs(30))
        })
        .await
        .expect("claim");
    assert!(
        matches!(
            other,
            ClaimAnswer::Conflict {
                reason: ConflictReason::Arguments,
                ..
            }
        ),
        "{other:?}"
    );
    assert!(matches!(store.complete(&crashed, done("1")).await, Ok(())));
}

async fn renewing_a_lease_keeps_the_claim_from_being_taken_over(store: Arc<dyn Store>) {
    let key = refund_key(&fresh_run(), "1182");
    let holder = claimed(&*store, request(&key, Duration::ZERO)).await;
    store
        .renew(&holder, Duration::from_secs(60))
        .await
        .expect("renew");
    let other = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(
        matches!(other, ClaimAnswer::InFlight(_)),
        "a renewed claim must still be held: {other:?}"
    );
    store
        .complete(&holder, done("1"))
        .await
        .expect("the holder completes");
}

async fn leases_are_renewed_every_third_of_a_lease(store: Arc<dyn Store>) {
    assert_eq!(
        store.renew_every(Duration::from_secs(30)),
        Some(Duration::from_secs(10))
    );
}

async fn the_guard_renews_the_lease_while_a_long_action_runs(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    // Long enough that a renewal delayed by a loaded machine still lands
    // within the lease; the duplicate waits three leases.
    let lease = Duration::from_secs(1);
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42).lease(lease),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    // Without renewals the lease would run out three times over while this
    // duplicate waits; it must never take over.
    let duplicate = refund_call(&store, &run, "1182", 42)
        .lease(lease)
        .wait(lease * 3)
        .run(refunds(&provider, 42))
        .await;
    assert!(
        matches!(&duplicate, Err(err) if matches!(err.guard(), Some(Error::InProgress { .. }))),
        "{duplicate:?}"
    );
    assert!(holder.finish().await.expect("holder").is_fresh());
    assert_eq!(provider.refunds(), 1);
}
