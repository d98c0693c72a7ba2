//! "Don't know" is an answer: an action that fails after it may have taken
//! effect is never run again blindly. The provider here takes no key, so
//! a second refund would reach the customer: each case counts the refunds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::Case;
use super::case::{Subject, case};
use super::kit::{
    CountingProvider, RefundError, Refunded, claimed, fresh_run, refund_call, refund_key, refunds,
    request,
};
use idempotent_tools::call::{Call, Takeover};
use idempotent_tools::records::RecordState;
use idempotent_tools::store::Store;
use idempotent_tools::{Error, Run, Verified};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            a_definite_failure_releases_the_claim_and_the_retry_acts_once,
            []
        ),
        case!(
            an_unknown_failure_is_recorded_and_the_retry_is_not_run_again,
            [],
            subject
        ),
        case!(
            an_unknown_failure_the_provider_applied_replays_what_it_applied,
            []
        ),
        case!(
            an_unknown_failure_the_provider_never_saw_releases_and_the_retry_acts_once,
            []
        ),
        case!(
            not_applied_is_trusted_only_once_the_settle_time_has_passed,
            []
        ),
        case!(
            a_verification_that_cannot_tell_panics_or_hangs_leaves_the_outcome_unknown,
            []
        ),
        case!(
            a_call_dropped_once_the_provider_acted_is_verified_not_released,
            []
        ),
        case!(
            a_call_dropped_while_it_asks_the_provider_leaves_the_asking_to_a_task,
            []
        ),
        case!(
            a_takeover_dropped_while_it_asks_the_provider_leaves_the_asking_to_a_task,
            [Leases]
        ),
        case!(
            a_takeover_from_a_holder_that_acted_then_vanished_verifies_and_replays,
            [Leases]
        ),
        case!(
            a_takeover_that_reruns_refunds_twice_where_the_provider_takes_no_key,
            [Leases]
        ),
    ]
}

/// The refund reaches the provider, then its answer is lost.
async fn refunded_then_timed_out(provider: &CountingProvider) -> Result<Refunded, RefundError> {
    provider.refund("1182", 42);
    Err(RefundError::TimedOut)
}

/// A verification that lists the order's refunds at `provider`.
fn lookup(
    provider: &Arc<CountingProvider>,
) -> impl Fn(idempotent_tools::call::Key) -> std::future::Ready<Verified<Refunded>> + use<> {
    let provider = provider.clone();
    move |_key| {
        std::future::ready(match provider.refund_of("1182") {
            Some(refund) => Verified::Applied(refund),
            None => Verified::NotApplied,
        })
    }
}

fn call(store: &Arc<dyn Store>, run: &Run) -> Call {
    refund_call(store, run, "1182", 42)
}

fn guard_error(result: Result<impl std::fmt::Debug, RefundError>) -> Error {
    match result {
        Err(RefundError::Guard(err)) => Arc::try_unwrap(err).unwrap_or_else(|err| {
            panic!("the guard's error is shared: {err:?}");
        }),
        other => panic!("expected the guard's error, got {other:?}"),
    }
}

async fn a_definite_failure_releases_the_claim_and_the_retry_acts_once(store: Arc<dyn Store>) {
    let (provider, run) = (CountingProvider::default(), fresh_run());
    let declined = call(&store, &run)
        .run_classified(async { Err::<Refunded, _>(RefundError::Declined("card".into())) })
        .await;
    assert_eq!(declined, Err(RefundError::Declined("card".into())));
    let retry = call(&store, &run)
        .run_classified(refunds(&provider, 42))
        .await
        .expect("the retry");
    assert!(retry.is_fresh());
    assert_eq!(provider.refunds(), 1);
}

async fn an_unknown_failure_is_recorded_and_the_retry_is_not_run_again(subject: Subject) {
    let store = subject.store.clone();
    let (provider, run) = (CountingProvider::default(), fresh_run());
    let timed_out = call(&store, &run)
        .run_classified(refunded_then_timed_out(&provider))
        .await;
    assert_eq!(
        timed_out,
        Err(RefundError::TimedOut),
        "the call sees its own error"
    );
    let retry = call(&store, &run)
        .run_classified(refunds(&provider, 42))
        .await;
    assert!(
        matches!(guard_error(retry), Error::UnknownOutcome { .. }),
        "the retry is told the outcome is unknown"
    );
    assert_eq!(provider.refunds(), 1, "and does not refund again");
    if let Some(records) = subject.records.clone() {
        let record = records
            .inspect(&refund_key(&run, "1182"))
            .await
            .expect("inspect")
            .expect("a record");
        assert_eq!(record.state, RecordState::Unknown);
        let detail = record.result.expect("the unknown outcome's detail");
        let detail = detail.to_json().expect("json").into_owned();
        assert!(detail.contains("did not answer in time"), "{detail}");
    }
}

async fn an_unknown_failure_the_provider_applied_replays_what_it_applied(store: Arc<dyn Store>) {
    let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
    let first = call(&store, &run)
        .verify(lookup(&provider))
        .run_classified(refunded_then_timed_out(&provider))
        .await
        .expect("the provider's refund, found");
    assert_eq!(first.value().map(|r| r.id.as_str()), Some("re_1"));
    let retry = call(&store, &run)
        .verify(lookup(&provider))
        .run_classified(refunds(&provider, 42))
        .await
        .expect("the retry");
    assert!(retry.is_replay());
    assert_eq!(retry.value().map(|r| r.id.as_str()), Some("re_1"));
    assert_eq!(provider.refunds(), 1);
}

async fn an_unknown_failure_the_provider_never_saw_releases_and_the_retry_acts_once(
    store: Arc<dyn Store>,
) {
    let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
    // The connection dropped before the request went out.
    let lost = call(&store, &run)
        .verify(lookup(&provider))
        .run_classified(async { Err::<Refunded, _>(RefundError::TimedOut) })
        .await;
    assert_eq!(lost, Err(RefundError::TimedOut));
    let retry = call(&store, &run)
        .verify(lookup(&provider))
        .run_classified(refunds(&provider, 42))
        .await
        .expect("the retry");
    assert!(retry.is_fresh());
    assert_eq!(provider.refunds(), 1);
}

async fn not_applied_is_trusted_only_once_the_settle_time_has_passed(store: Arc<dyn Store>) {
    let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
    // The provider's lookup lags: its first three answers miss the refund.
    let asked = Arc::new(AtomicUsize::new(0));
    let lagging = {
        let (provider, asked) = (provider.clone(), asked.clone());
        move |_key| {
            let seen = asked.fetch_add(1, Ordering::SeqCst) >= 3;
            std::future::ready(match provider.refund_of("1182").filter(|_| seen) {
                Some(refund) => Verified::Applied(refund),
                None => Verified::NotApplied,
            })
        }
    };
    let first = call(&store, &run)
        .verify(lagging)
        .settle(Duration::from_millis(300))
        .run_classified(refunded_then_timed_out(&provider))
        .await
        .expect("found once the lookup caught up");
    assert_eq!(first.value().map(|r| r.id.as_str()), Some("re_1"));
    assert!(asked.load(Ordering::SeqCst) > 3);
    assert_eq!(provider.refunds(), 1);
}

/// How a verification fails to answer.
#[derive(Clone, Copy, PartialEq)]
enum Silence {
    NotYet,
    Panics,
    Hangs,
}

async fn a_verification_that_cannot_tell_panics_or_hangs_leaves_the_outcome_unknown(
    store: Arc<dyn Store>,
) {
    for silence in [Silence::NotYet, Silence::Panics, Silence::Hangs] {
        let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
        let asked = Arc::new(AtomicUsize::new(0));
        let cannot_tell = {
            let asked = asked.clone();
            move |_key| {
                asked.fetch_add(1, Ordering::SeqCst);
                if silence == Silence::Panics {
                    // Unwinds as a panic does, without the panic hook's noise.
                    std::panic::resume_unwind(Box::new("a verification that panics"));
                }
                async move {
                    if silence == Silence::Hangs {
                        std::future::pending::<()>().await;
                    }
                    Verified::<Refunded>::NotYet
                }
            }
        };
        let timed_out = call(&store, &run)
            .wait(Duration::from_millis(200))
            .verify(cannot_tell)
            .run_classified(refunded_then_timed_out(&provider))
            .await;
        assert_eq!(timed_out, Err(RefundError::TimedOut));
        // A panic is caught, and counts as "cannot tell" (how often it is
        // asked again within the wait depends on how long a panic takes).
        let least = if silence == Silence::NotYet { 2 } else { 1 };
        assert!(
            asked.load(Ordering::SeqCst) >= least,
            "asked again while it could not tell"
        );
        let retry = call(&store, &run)
            .run_classified(refunds(&provider, 42))
            .await;
        assert!(matches!(guard_error(retry), Error::UnknownOutcome { .. }));
        assert_eq!(provider.refunds(), 1, "never read as not applied");
    }
}

/// A framework's timeout around the tool drops the call once the refund
/// went out: the claim is not released, the provider is asked on a task of
/// the guard's own, and the retry replays the refund it found.
async fn a_call_dropped_once_the_provider_acted_is_verified_not_released(store: Arc<dyn Store>) {
    let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
    let acted = Arc::new(Notify::new());
    let mut first = {
        let (provider, acted) = (provider.clone(), acted.clone());
        Box::pin(
            call(&store, &run)
                .verify(lookup(&provider))
                .run_classified(async move {
                    provider.refund("1182", 42);
                    acted.notify_one();
                    std::future::pending::<Result<Refunded, RefundError>>().await
                }),
        )
    };
    tokio::select! {
        ended = &mut first => panic!("the action never ends: {ended:?}"),
        () = acted.notified() => {}
    }
    drop(first);
    let retry = call(&store, &run)
        .verify(lookup(&provider))
        .run_classified(refunds(&provider, 42))
        .await
        .expect("the dropped call's refund, found");
    assert!(retry.is_replay(), "{retry:?}");
    assert_eq!(retry.value().map(|r| r.id.as_str()), Some("re_1"));
    assert_eq!(provider.refunds(), 1, "the provider takes no key");
}

async fn a_call_dropped_while_it_asks_the_provider_leaves_the_asking_to_a_task(
    store: Arc<dyn Store>,
) {
    dropped_while_asking(store, false).await;
}

async fn a_takeover_dropped_while_it_asks_the_provider_leaves_the_asking_to_a_task(
    store: Arc<dyn Store>,
) {
    dropped_while_asking(store, true).await;
}

/// The call is dropped while its verification waits on the provider: after
/// its own refund timed out, or, with `takeover`, as it takes over from a
/// holder that refunded then vanished. The asking goes on without it, and
/// the retry waits for what it finds.
async fn dropped_while_asking(store: Arc<dyn Store>, takeover: bool) {
    let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
    if takeover {
        a_holder_acted_then_vanished(&store, &run, &provider).await;
    }
    let (asked, answer) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let slow_lookup = {
        let (provider, asked, answer) = (provider.clone(), asked.clone(), answer.clone());
        move |_key| {
            let (provider, asked, answer) = (provider.clone(), asked.clone(), answer.clone());
            async move {
                asked.notify_one();
                answer.notified().await;
                match provider.refund_of("1182") {
                    Some(refund) => Verified::Applied(refund),
                    None => Verified::NotApplied,
                }
            }
        }
    };
    let acting = provider.clone();
    let mut first = Box::pin(
        call(&store, &run)
            .verify(slow_lookup)
            .run_classified(async move {
                match takeover {
                    true => refunds(&acting, 42).await,
                    false => refunded_then_timed_out(&acting).await,
                }
            }),
    );
    tokio::select! {
        ended = &mut first => panic!("the lookup has not answered: {ended:?}"),
        () = asked.notified() => {}
    }
    drop(first);
    let retry = tokio::spawn({
        let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
        async move {
            call(&store, &run)
                .verify(lookup(&provider))
                .run_classified(refunds(&provider, 42))
                .await
        }
    });
    // The lookup asked again on the guard's own task answers: it found it.
    asked.notified().await;
    answer.notify_one();
    let retry = retry
        .await
        .expect("the retry's task")
        .expect("the refund, found");
    assert_eq!(retry.value().map(|r| r.id.as_str()), Some("re_1"));
    assert_eq!(provider.refunds(), 1, "the provider takes no key");
}

/// A holder that refunded, then vanished without completing (its process
/// died): its zero lease has run out the moment it was written.
async fn a_holder_acted_then_vanished(
    store: &Arc<dyn Store>,
    run: &Run,
    provider: &CountingProvider,
) {
    let key = refund_key(run, "1182");
    claimed(&**store, request(&key, Duration::ZERO)).await;
    provider.refund("1182", 42);
}

async fn a_takeover_from_a_holder_that_acted_then_vanished_verifies_and_replays(
    store: Arc<dyn Store>,
) {
    let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
    a_holder_acted_then_vanished(&store, &run, &provider).await;
    let taken_over = call(&store, &run)
        .verify(lookup(&provider))
        .run_classified(refunds(&provider, 42))
        .await
        .expect("the vanished holder's refund, found");
    assert!(taken_over.is_replay(), "{taken_over:?}");
    assert_eq!(taken_over.value().map(|r| r.id.as_str()), Some("re_1"));
    assert_eq!(
        provider.refunds(),
        1,
        "the provider takes no key, and saw one refund"
    );
}

/// What verification prevents: with `Takeover::Rerun` and a provider that
/// takes no key, the takeover refunds a second time. The case expects it.
async fn a_takeover_that_reruns_refunds_twice_where_the_provider_takes_no_key(
    store: Arc<dyn Store>,
) {
    let (provider, run) = (CountingProvider::default(), fresh_run());
    a_holder_acted_then_vanished(&store, &run, &provider).await;
    let rerun = call(&store, &run)
        .takeover(Takeover::Rerun)
        .run_classified(refunds(&provider, 42))
        .await
        .expect("the rerun");
    assert!(rerun.is_fresh());
    assert_eq!(provider.refunds(), 2, "a provider without keys takes both");
}
