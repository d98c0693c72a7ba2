//! Calls cancelled and stores that fail: calls dropped at every `.await`, a
//! storm of calls cancelled at random, a renewal that stalls, completions
//! that fail for a while or for good.
//!
//! Every follow-up call here has a lease of an hour and a wait far shorter:
//! a claim left behind by a dropped call would make it fail with
//! `InProgress`, so none of these cases can pass by waiting a lease out.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Barrier;

use super::Case;
use super::case::case;
use super::faulty::Faulty;
use super::kit::{CountingProvider, PATIENCE, RefundError, Refunded, fresh_run, refund_call};
use idempotent_tools::{
    Error, Outcome, Run,
    call::{Call, Takeover},
    store::{Store, StoreError},
};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            a_storm_of_identical_calls_cancelled_at_random_acts_once,
            [],
            |s| a_storm_of_identical_calls_cancelled_at_random_acts_once(s.store, 1000)
        ),
        case!(
            a_call_dropped_at_any_await_leaves_no_claim_and_loses_no_result,
            []
        ),
        case!(
            a_call_dropped_before_acting_is_never_reported_as_an_unknown_outcome,
            []
        ),
        case!(a_stalled_renewal_never_stalls_the_action, []),
        case!(
            a_completion_that_fails_briefly_is_tried_again_and_recorded,
            []
        ),
        case!(a_completion_that_keeps_failing_says_the_action_ran, []),
        case!(
            an_unrecorded_result_is_not_acted_again_under_report_unknown,
            [Leases]
        ),
    ]
}

/// The lease of every call here: far longer than any case may take.
const LONG_LEASE: Duration = Duration::from_secs(3600);

/// How long a follow-up may wait for a call that is really in flight (a
/// completion or release still on its way); far shorter than a lease.
const FOLLOW_UP_WAIT: Duration = Duration::from_secs(10);

/// Polls a future at most `polls` times, then drops it, as a timeout or a
/// `select!` would. `None` if it was dropped before it finished.
struct PollLimit<F> {
    fut: Option<Pin<Box<F>>>,
    polls: usize,
}

impl<F: Future> PollLimit<F> {
    fn new(fut: F, polls: usize) -> PollLimit<F> {
        PollLimit {
            fut: Some(Box::pin(fut)),
            polls,
        }
    }
}

impl<F: Future> Future for PollLimit<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            self.fut = None;
            return Poll::Ready(None);
        }
        self.polls -= 1;
        let Some(fut) = self.fut.as_mut() else {
            return Poll::Ready(None);
        };
        match fut.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending if self.polls == 0 => {
                // Dropped right here, at the `.await` it was parked on.
                self.fut = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A stand-in provider plus a count of actions that ran to their end.
#[derive(Default)]
struct Counted {
    provider: CountingProvider,
    ended: AtomicUsize,
}

impl Counted {
    /// A refund action with an `.await` before and after the provider call,
    /// so a drop can land before it acts, after it acts but before it
    /// returns, or after it returns.
    async fn refund(&self) -> Result<Refunded, RefundError> {
        tokio::task::yield_now().await;
        let refund = self.provider.refund("1182", 42);
        tokio::task::yield_now().await;
        self.ended.fetch_add(1, Ordering::SeqCst);
        Ok(refund)
    }

    /// How many actions returned their result.
    fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }
}

/// The call every case makes: a refund of 42 on order 1182 with a long lease.
fn call(store: &Arc<dyn Store>, run: &Run) -> Call {
    refund_call(store, run, "1182", 42).lease(LONG_LEASE)
}

/// Asks once more after the case, and returns what it got: it must be
/// answered without waiting out a lease.
async fn follow_up(store: &Arc<dyn Store>, run: &Run, counted: &Counted) -> Outcome<Refunded> {
    call(store, run)
        .wait(FOLLOW_UP_WAIT)
        .run(counted.refund())
        .await
        .unwrap_or_else(|e| panic!("the follow-up call must be answered: {e:?}"))
}

async fn a_call_dropped_at_any_await_leaves_no_claim_and_loses_no_result(store: Arc<dyn Store>) {
    dropped_at_every_await(store, Takeover::Rerun).await;
}

/// Under `ReportUnknown` a claim left behind would be taken over and
/// reported as an unknown outcome, though its action never ran.
async fn a_call_dropped_before_acting_is_never_reported_as_an_unknown_outcome(
    store: Arc<dyn Store>,
) {
    dropped_at_every_await(store, Takeover::ReportUnknown).await;
}

async fn dropped_at_every_await(store: Arc<dyn Store>, takeover: Takeover) {
    for polls in 0.. {
        let run = fresh_run();
        let counted = Counted::default();
        let first = call(&store, &run).takeover(takeover).run(counted.refund());
        let first = PollLimit::new(first, polls).await;
        let acted = counted.ended();
        let again = call(&store, &run)
            .takeover(takeover)
            .wait(FOLLOW_UP_WAIT)
            .run(counted.refund())
            .await
            .unwrap_or_else(|e| panic!("dropped after {polls} polls, the follow-up failed: {e:?}"));
        assert_eq!(
            counted.ended(),
            1,
            "dropped after {polls} polls: an action ran to its end {} times",
            counted.ended()
        );
        match first {
            Some(first) => {
                let first = first.expect("the undisturbed call");
                assert!(first.is_fresh(), "{first:?}");
                assert!(again.is_replay(), "{again:?}");
                assert_eq!(first.value(), again.value());
                return;
            }
            // Its action returned before the drop: the result was recorded
            // all the same, and the follow-up replays it.
            None if acted == 1 => assert!(
                again.is_replay(),
                "dropped after {polls} polls, once its action had returned: {again:?}"
            ),
            None => assert!(
                again.is_fresh(),
                "dropped after {polls} polls, before its action returned: {again:?}"
            ),
        }
        assert!(polls < 10_000, "the call never finished");
    }
}

/// A small random generator, seeded, so a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn a_storm_of_identical_calls_cancelled_at_random_acts_once(
    store: Arc<dyn Store>,
    callers: usize,
) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 | 1)
        .unwrap_or(1);
    let mut random = XorShift(seed);
    let run = fresh_run();
    let counted = Arc::new(Counted::default());
    let start = Arc::new(Barrier::new(callers));
    let mut tasks = Vec::with_capacity(callers);
    for _ in 0..callers {
        // Half are never cancelled; the others are dropped after 0 to 15 polls.
        let polls = match random.next() % 32 {
            n if n < 16 => usize::MAX,
            n => (n - 16) as usize,
        };
        let (store, run, counted, start) =
            (store.clone(), run.clone(), counted.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let call = call(&store, &run).wait(PATIENCE).run(counted.refund());
            PollLimit::new(call, polls).await
        }));
    }
    let mut values = Vec::new();
    let mut fresh = 0;
    for task in tasks {
        let Some(outcome) = task.await.expect("task") else {
            continue;
        };
        let outcome =
            outcome.unwrap_or_else(|e| panic!("a surviving call failed (seed {seed}): {e:?}"));
        fresh += usize::from(outcome.is_fresh());
        values.push(outcome.into_value().expect("a value"));
    }
    assert!(fresh <= 1, "{fresh} fresh results (seed {seed})");
    assert!(
        values.iter().all(|v| *v == values[0]),
        "survivors saw different results (seed {seed})"
    );
    let again = follow_up(&store, &run, &counted).await;
    assert_eq!(
        counted.ended(),
        1,
        "actions that ran to their end (seed {seed})"
    );
    if let Some(first) = values.first() {
        assert_eq!(again.value(), Some(first), "seed {seed}");
    }
}

async fn a_stalled_renewal_never_stalls_the_action(store: Arc<dyn Store>) {
    let stalled = Arc::new(Faulty::new(store).stalling_renewals());
    let store: Arc<dyn Store> = stalled.clone();
    let run = fresh_run();
    let provider = CountingProvider::default();
    let outcome = tokio::time::timeout(
        PATIENCE,
        call(&store, &run).run(async {
            // Goes on only once a renewal is stuck in the store; the action
            // must keep running while it is.
            stalled.renewal_entered.notified().await;
            for _ in 0..5 {
                tokio::task::yield_now().await;
            }
            Ok::<_, RefundError>(provider.refund("1182", 42))
        }),
    )
    .await
    .expect("the action stalled behind a renewal")
    .expect("outcome");
    assert!(outcome.is_fresh());
    stalled.let_renewals_through.notify_one();
    assert_eq!(provider.refunds(), 1);
}

async fn a_completion_that_fails_briefly_is_tried_again_and_recorded(store: Arc<dyn Store>) {
    let failing = Arc::new(Faulty::new(store).failing_completions(3));
    let store: Arc<dyn Store> = failing.clone();
    let run = fresh_run();
    let counted = Counted::default();
    let first = call(&store, &run)
        .run(counted.refund())
        .await
        .expect("recorded after retries");
    assert!(first.is_fresh());
    assert_eq!(failing.completions.load(Ordering::SeqCst), 4);
    let again = follow_up(&store, &run, &counted).await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(counted.provider.refunds(), 1);
}

async fn a_completion_that_keeps_failing_says_the_action_ran(store: Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(Faulty::new(store).failing_completions(usize::MAX));
    let run = fresh_run();
    let counted = Counted::default();
    let err = call(&store, &run)
        .lease(Duration::from_millis(300))
        .run(counted.refund())
        .await
        .expect_err("the result cannot be recorded");
    let err = err.guard().expect("a guard error");
    assert_eq!(err.action_ran(), Some(true), "{err}");
    assert!(err.to_string().contains("ran"), "{err}");
    match err {
        Error::NotRecorded { result, cause, .. } => {
            assert!(matches!(cause, StoreError::Unavailable(_)), "{cause:?}");
            let result = result.as_deref().expect("the result, as JSON");
            assert!(result.contains("re_1"), "{result}");
        }
        other => panic!("expected NotRecorded, got {other:?}"),
    }
    assert_eq!(counted.provider.refunds(), 1);
}

async fn an_unrecorded_result_is_not_acted_again_under_report_unknown(store: Arc<dyn Store>) {
    let failing: Arc<dyn Store> =
        Arc::new(Faulty::new(store.clone()).failing_completions(usize::MAX));
    let run = fresh_run();
    let counted = Counted::default();
    let lease = Duration::from_millis(300);
    let err = call(&failing, &run)
        .lease(lease)
        .run(counted.refund())
        .await
        .expect_err("not recorded");
    assert_eq!(err.guard().and_then(Error::action_ran), Some(true));
    // The claim stays held until its lease runs out, then the takeover
    // policy decides, as after a crash.
    let retry = call(&store, &run)
        .lease(lease)
        .wait(PATIENCE)
        .takeover(Takeover::ReportUnknown)
        .run(counted.refund())
        .await
        .expect_err("an unknown outcome");
    assert!(
        matches!(retry.guard(), Some(Error::UnknownOutcome { .. })),
        "{retry:?}"
    );
    assert_eq!(counted.provider.refunds(), 1, "the action ran again");
}
