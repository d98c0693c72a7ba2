//! The promises every durable store keeps, written once: one statement per
//! step, leases and fences, renewals, replays byte for byte, long keys,
//! purging in batches, and forgetting.
//!
//! A store's test file implements [`Durable`] for its store, wraps it in a
//! [`Held`] with the directory or schema it lives in, and instantiates every case
//! with `durable_suite!(make)`, where `make(purge_batch)` is an async
//! function giving `Option<S>` (`None` skips, for a server that is not
//! configured outside CI), with purges deleting at most `purge_batch` rows
//! per statement when it is `Some`.
//!
//! Keys carry a fresh run id per case, so cases never see each other's
//! records, even on a shared database.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idempotent_tools::{
    Call, Claim, ClaimAnswer, ClaimRequest, ConflictReason, Ending, Error, Finished, Forget, Key,
    Record, RecordCount, RecordPage, RecordQuery, Recorded, Run, Store, StoreError, StoreFuture,
    StoreResult, ToolId,
};

use crate::adversarial::{
    Ends, Holder, PayError, Provider, fresh_run, refund_call, refund_key, refunds, usd,
};

/// A durable store under test, with the one thing the cases read of it
/// beyond the [`Store`] trait.
pub trait Durable: Store {
    /// How many statements the store has sent to its database so far.
    fn statements(&self) -> u64;
}

/// A store together with what it lives in (a directory, a schema), which is
/// removed after the store is dropped.
pub struct Held<S, Place> {
    pub store: S,
    pub place: Place,
}

impl<S: Store, Place: Send + Sync + 'static> Store for Held<S, Place> {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        self.store.claim(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Finished,
    ) -> StoreFuture<'a, StoreResult<()>> {
        self.store.complete(claim, finished)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.store.release(claim)
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        self.store.renew(claim, lease)
    }
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        self.store.purge_expired()
    }
    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        self.store.forget_with(key, how)
    }
    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        self.store.list(query)
    }
    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        self.store.inspect(key)
    }
    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        self.store.count()
    }
    fn kind(&self) -> &'static str {
        self.store.kind()
    }
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        self.store.renew_every(lease)
    }
}

impl<S: Durable, Place: Send + Sync + 'static> Durable for Held<S, Place> {
    fn statements(&self) -> u64 {
        self.store.statements()
    }
}

/// The rows a purge deletes per statement in
/// [`a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records`].
pub const PURGE_BATCH: usize = 10;

/// The tool every claim here is made for.
pub static TOOL: ToolId = ToolId::new("shop::refund_order");

/// A claim for [`TOOL`] with the usual arguments and an hour's retention.
pub fn request<'a>(key: &'a Key, lease: Duration) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool: &TOOL,
        fingerprint: usd(42),
        lease,
        retention: Duration::from_secs(3600),
    }
}

/// A successful ending recording `json`.
pub fn finished(json: &str) -> Finished {
    Finished {
        ending: Ending::Ok,
        value: Recorded::from_json(json),
        finished_at: SystemTime::now(),
    }
}

/// Claims, and fails unless the claim is now held.
pub async fn claimed(store: &dyn Store, req: ClaimRequest<'_>) -> Claim {
    match store.claim(req).await.expect("claim") {
        ClaimAnswer::Claimed(claim) => claim,
        other => panic!("expected to hold the claim, got {other:?}"),
    }
}

/// Claims a key someone else holds, and returns the wait.
pub async fn in_flight(store: &dyn Store, key: &Key) -> idempotent_tools::Wait {
    match store
        .claim(request(key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimAnswer::InFlight(woken) => woken,
        other => panic!("expected the claim in flight, got {other:?}"),
    }
}

/// Refunds order 1182 of `run` through `store`, which must refuse as
/// unavailable without the action ever reaching `provider`.
pub async fn refused_as_unavailable(store: &Arc<dyn Store>, run: &Run, provider: &Provider) {
    let refused = refund_call(store, run, "1182", 42)
        .run(refunds(provider, 42))
        .await;
    match &refused {
        Err(err) => assert!(
            matches!(err.guard(), Some(Error::Store(StoreError::Unavailable(_)))),
            "{err:?}"
        ),
        Ok(outcome) => panic!("the action ran without a claim: {outcome:?}"),
    }
    assert_eq!(provider.refunds(), 0, "no action may run without a claim");
}

pub async fn a_fresh_claim_a_completion_and_a_replay_take_one_statement_each(store: impl Durable) {
    let key = refund_key(&fresh_run(), "1182");

    let before = store.statements();
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    assert_eq!(store.statements() - before, 1, "a fresh claim");

    let before = store.statements();
    store
        .complete(&claim, finished(r#"{"id":"re_1"}"#))
        .await
        .expect("complete");
    assert_eq!(store.statements() - before, 1, "a completion");

    let before = store.statements();
    let replay = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(replay, ClaimAnswer::Completed(_)), "{replay:?}");
    assert_eq!(store.statements() - before, 1, "a replay");

    let other = refund_key(&fresh_run(), "1183");
    let claim = claimed(&store, request(&other, Duration::from_secs(30))).await;
    let before = store.statements();
    let in_flight = store
        .claim(request(&other, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(in_flight, ClaimAnswer::InFlight(_)));
    assert_eq!(
        store.statements() - before,
        1,
        "a claim that finds one in flight"
    );
    let before = store.statements();
    store.release(&claim).await.expect("release");
    assert_eq!(store.statements() - before, 1, "a release");
}

pub async fn a_claim_past_its_lease_is_taken_over_with_a_higher_fence_and_the_stale_holder_changes_nothing(
    store: impl Durable,
) {
    let key = refund_key(&fresh_run(), "1182");
    // A zero lease has run out the moment it is written: the holder stands
    // for one whose process died.
    let stale = claimed(&store, request(&key, Duration::ZERO)).await;
    assert!(!stale.taken_over);

    let current = claimed(&store, request(&key, Duration::from_secs(30))).await;
    assert!(current.taken_over, "the new holder must know it took over");
    assert!(current.fence > stale.fence, "a takeover bumps the fence");
    assert_ne!(current.owner, stale.owner);

    assert!(matches!(
        store.renew(&stale, Duration::from_secs(30)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.complete(&stale, finished(r#""stale""#)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&stale).await,
        Err(StoreError::LeaseLost)
    ));

    store
        .complete(&current, finished(r#""current""#))
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

pub async fn a_lease_that_ran_out_is_not_taken_over_by_other_arguments(store: impl Durable) {
    let key = refund_key(&fresh_run(), "1182");
    let crashed = claimed(&store, request(&key, Duration::ZERO)).await;
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
    assert!(matches!(
        store.complete(&crashed, finished("1")).await,
        Ok(())
    ));
}

pub async fn renewing_a_lease_keeps_the_claim_from_being_taken_over(store: impl Durable) {
    let key = refund_key(&fresh_run(), "1182");
    let holder = claimed(&store, request(&key, Duration::ZERO)).await;
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
        .complete(&holder, finished("1"))
        .await
        .expect("the holder completes");
}

pub async fn leases_are_renewed_every_third_of_a_lease(store: impl Durable) {
    assert_eq!(
        store.renew_every(Duration::from_secs(30)),
        Some(Duration::from_secs(10))
    );
}

pub async fn the_guard_renews_the_lease_while_a_long_action_runs(store: impl Durable) {
    let store: Arc<dyn Store> = Arc::new(store);
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
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

pub async fn a_replay_is_byte_identical_to_the_recorded_json(store: impl Durable) {
    let key = refund_key(&fresh_run(), "1182");
    // Spacing, key order, escapes and number forms that a parse and
    // re-serialisation would change.
    let big = "é".repeat(300_000);
    let json = format!(
        "{{ \"z\" : 1.50, \"a\": [ {{\"nested\": {{\"deep\": [null, true, \"\\u00e9\\n\"]}}}} ], \
         \"emoji\": \"\u{1F4B8}\", \"big\": \"{big}\" }}"
    );
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    store
        .complete(&claim, finished(&json))
        .await
        .expect("complete");
    match store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim")
    {
        ClaimAnswer::Completed(done) => {
            assert_eq!(done.ending, Ending::Ok);
            assert!(done.value.to_json().expect("json") == json.as_str());
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

pub async fn a_key_of_a_hundred_kilobytes_is_claimed_and_replayed(store: impl Durable) {
    let store: Arc<dyn Store> = Arc::new(store);
    let long = "k".repeat(100 * 1024);
    let key = Key::builder()
        .part("run", &fresh_run())
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("order_id", &long))
        .and_then(|b| b.finish())
        .expect("key");
    let provider = Provider::default();
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
pub async fn a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records(
    store: impl Durable,
) {
    let run = fresh_run();
    for order in 0..25 {
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
            .complete(&claim, finished("1"))
            .await
            .expect("complete");
    }
    let held_key = refund_key(&run, "held");
    let held = claimed(
        &store,
        ClaimRequest {
            retention: Duration::ZERO,
            ..request(&held_key, Duration::from_secs(30))
        },
    )
    .await;
    let live_key = refund_key(&run, "live");
    let live = claimed(&store, request(&live_key, Duration::from_secs(30))).await;
    store
        .complete(&live, finished("2"))
        .await
        .expect("complete");

    let before = store.statements();
    assert_eq!(store.purge_expired().await.expect("purge"), 25);
    assert_eq!(
        store.statements() - before,
        3,
        "25 rows in batches of {PURGE_BATCH}"
    );

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
    store
        .complete(&held, finished("3"))
        .await
        .expect("complete");
}

pub async fn purging_while_expired_keys_are_claimed_again_never_acts_twice(store: impl Durable) {
    let store: Arc<dyn Store> = Arc::new(store);
    let run = fresh_run();
    let provider = Arc::new(Provider::default());
    let orders = 50;
    for order in 0..orders {
        let _ = refund_call(&store, &run, &order.to_string(), 42)
            .retention(Duration::ZERO)
            .run(async { Ok::<_, PayError>(provider.refund("x", 42)) })
            .await
            .expect("first round");
    }
    assert_eq!(provider.refunds(), orders);
    // Every record has expired: each key acts exactly once more, however the
    // purges and the duplicates interleave.
    let purger = {
        let store = store.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                store.purge_expired().await.expect("purge");
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
                    .run(async { Ok::<_, PayError>(provider.refund("x", 42)) })
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

pub async fn forgetting_removes_a_finished_record_but_never_a_live_claim(store: impl Durable) {
    let run = fresh_run();
    let done_key = refund_key(&run, "done");
    let claim = claimed(&store, request(&done_key, Duration::from_secs(30))).await;
    store
        .complete(&claim, finished("1"))
        .await
        .expect("complete");
    let held_key = refund_key(&run, "held");
    let held = claimed(&store, request(&held_key, Duration::from_secs(30))).await;

    assert!(store.forget(&done_key).await.expect("forget"));
    assert!(matches!(
        store.forget(&held_key).await,
        Err(StoreError::LiveClaim { .. })
    ));
    claimed(&store, request(&done_key, Duration::from_secs(30))).await;
    store
        .complete(&held, finished("2"))
        .await
        .expect("complete");
}

/// Not a case of the suite: times fresh calls and replays and prints them,
/// for a store file's own `measured_latency_…` test.
pub async fn measure_latency_of_a_guarded_call(store: impl Durable) {
    let store: Arc<dyn Store> = Arc::new(store);
    let run = fresh_run();
    let n = 200u32;
    let started = std::time::Instant::now();
    for order in 0..n {
        let _ = refund_call(&store, &run, &order.to_string(), 42)
            .run(async { Ok::<_, PayError>(order) })
            .await
            .expect("fresh");
    }
    let fresh = started.elapsed() / n;
    let started = std::time::Instant::now();
    for order in 0..n {
        let outcome = refund_call(&store, &run, &order.to_string(), 42)
            .run(async { Ok::<_, PayError>(order) })
            .await
            .expect("replay");
        assert!(outcome.is_replay());
    }
    let replay = started.elapsed() / n;
    println!("measured: a fresh call (claim + complete) {fresh:?}, a replay {replay:?}");
}

pub async fn a_result_that_cannot_be_stored_faithfully_is_refused_before_any_replay(
    store: impl Durable,
) {
    let store: Arc<dyn Store> = Arc::new(store);
    let run = fresh_run();
    let provider = Provider::default();
    let measure = || async {
        provider.refund("1182", 42);
        Ok::<_, PayError>(f64::NAN)
    };
    let first = refund_call(&store, &run, "1182", 42)
        .run(measure())
        .await
        .expect_err("a NaN is stored as null, which reads back as no number");
    match first.guard() {
        Some(Error::NotRecorded { cause, .. }) => {
            assert!(matches!(cause, StoreError::Unrecordable(_)), "{cause:?}")
        }
        other => panic!("expected NotRecorded, got {other:?}"),
    }
    assert_eq!(first.guard().and_then(Error::action_ran), Some(true));
    // Recorded as an unknown outcome: no later call runs it again, nor
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

/// Instantiates every case above as a test, on a multi-thread runtime.
/// `$make(purge_batch)` is an async function giving `Option<impl Durable>`.
#[macro_export]
macro_rules! durable_suite {
    ($make:path) => {
        $crate::durable_suite!(@list tests, $make);
    };
    // An expression: every case as a trial that needs `$needs` set.
    (trials $needs:expr, $make:path) => {
        $crate::durable_suite!(@list trials $needs, $make)
    };
    (@list $($how:tt)*) => {
        $crate::durable_suite!{@cases $($how)*,
            a_fresh_claim_a_completion_and_a_replay_take_one_statement_each,
            a_claim_past_its_lease_is_taken_over_with_a_higher_fence_and_the_stale_holder_changes_nothing,
            a_lease_that_ran_out_is_not_taken_over_by_other_arguments,
            renewing_a_lease_keeps_the_claim_from_being_taken_over,
            leases_are_renewed_every_third_of_a_lease,
            the_guard_renews_the_lease_while_a_long_action_runs,
            a_replay_is_byte_identical_to_the_recorded_json,
            a_key_of_a_hundred_kilobytes_is_claimed_and_replayed,
            purging_while_expired_keys_are_claimed_again_never_acts_twice,
            forgetting_removes_a_finished_record_but_never_a_live_claim,
            a_result_that_cannot_be_stored_faithfully_is_refused_before_any_replay,
        }
    };
    (@cases trials $needs:expr, $make:path, $($case:ident),* $(,)?) => {
        vec![
            $crate::harness::trial(
                "a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records",
                $needs,
                || async {
                    let store = $make(Some(durable::PURGE_BATCH)).await.expect("a store");
                    durable::a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records(store).await;
                },
            ),
            $($crate::harness::trial(stringify!($case), $needs, || async {
                let store = $make(None).await.expect("a store");
                durable::$case(store).await;
            }),)*
        ]
    };
    (@cases tests, $make:path, $($case:ident),* $(,)?) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records() {
            let Some(store) = $make(Some(durable::PURGE_BATCH)).await else { return };
            durable::a_purge_deletes_expired_records_in_batches_and_keeps_held_claims_and_live_records(store).await;
        }
        $(
            #[tokio::test(flavor = "multi_thread")]
            async fn $case() {
                let Some(store) = $make(None).await else { return };
                durable::$case(store).await;
            }
        )*
    };
}
