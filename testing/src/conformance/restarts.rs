//! The server restarts: the store's server is stopped and started again
//! under it while calls go on. Calls made before, during and after act
//! once per key, a waiter across the restart ends by replay without
//! sleeping out its wait, and a completion made while the server is down
//! is recorded once it is back.
//!
//! The server is the case's own, supplied by the store's test through
//! [`Suite::restarting`](super::Suite::restarting).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Case;
use super::case::Need;
use super::kit::{
    CountingProvider, Ends, Holder, PATIENCE, RefundError, Refunded, fresh_run, refund_call,
    refund_key, refunds, within,
};
use idempotent_tools::records::{RecordQuery, Records, Resolution};
use idempotent_tools::{
    Outcome, Run,
    store::{Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreFuture, StoreResult},
};

/// A server the restart cases stop and start again under a store; see
/// [`Suite::restarting`](super::Suite::restarting) for an example.
///
/// A method may block its thread for as long as the server takes to stop
/// or start (the cases run on a multi-thread runtime), or await a child
/// process.
pub trait Restart: 'static {
    /// Stops the server as a crash, a lost host or an operator's restart
    /// would (a kill, or a fast shutdown that cuts every connection), and
    /// returns once it no longer accepts connections.
    fn stop(&mut self) -> impl Future<Output = ()>;

    /// Starts the server again over the data it kept, at the same address,
    /// and returns once it accepts connections.
    fn start(&mut self) -> impl Future<Output = ()>;
}

/// [`Restart`], boxed.
pub(crate) trait Restarts {
    fn stop(&mut self) -> Pin<Box<dyn Future<Output = ()> + '_>>;
    fn start(&mut self) -> Pin<Box<dyn Future<Output = ()> + '_>>;
}

impl<R: Restart> Restarts for R {
    fn stop(&mut self) -> Pin<Box<dyn Future<Output = ()> + '_>> {
        Box::pin(Restart::stop(self))
    }
    fn start(&mut self) -> Pin<Box<dyn Future<Output = ()> + '_>> {
        Box::pin(Restart::start(self))
    }
}

/// A restart case's store, on the server it restarts.
pub(crate) struct Restartable {
    store: Arc<dyn Store>,
    /// The same store as [`Records`], if it offers them.
    records: Option<Arc<dyn Records>>,
    server: Box<dyn Restarts>,
}

impl Restartable {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        records: Option<Arc<dyn Records>>,
        server: Box<dyn Restarts>,
    ) -> Restartable {
        Restartable {
            store,
            records,
            server,
        }
    }
}

/// How long after its holder's completion a waiter may take to end: well
/// below its wait ([`PATIENCE`]) and below the rechecks of the project's
/// stores (every 2 s), so a waiter that lost its wake-up in the restart
/// and slept on fails.
const PROMPTLY: Duration = Duration::from_secs(1);

macro_rules! restart_case {
    ($name:ident) => {
        Case {
            name: stringify!($name),
            needs: &[Need::Restarts],
            body: super::Body::Restarting(|subject| Box::pin($name(subject))),
        }
    };
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        restart_case!(calls_before_during_and_after_a_restart_act_once_per_key),
        restart_case!(
            a_waiter_across_a_restart_ends_by_replay_and_a_completion_made_while_down_is_recorded
        ),
        restart_case!(an_unknown_outcome_is_listed_and_resolved_after_a_restart),
    ]
}

/// What reached the store so far.
#[derive(Clone, Copy, Default, Debug)]
struct Seen {
    /// Claims asked for.
    claims: usize,
    /// Claims answered "in flight": a caller about to wait.
    in_flight: usize,
    /// Completions asked for.
    completions: usize,
}

/// The store under test, watched: the case waits on what reached it.
struct Watched {
    inner: Arc<dyn Store>,
    seen: watch::Sender<Seen>,
}

impl Watched {
    fn new(inner: Arc<dyn Store>) -> Arc<Watched> {
        Arc::new(Watched {
            inner,
            seen: watch::Sender::new(Seen::default()),
        })
    }

    fn seen(&self) -> Seen {
        *self.seen.borrow()
    }

    /// Returns once what reached the store satisfies `enough`.
    async fn until(&self, what: &str, enough: impl FnMut(&Seen) -> bool) {
        let mut seen = self.seen.subscribe();
        let reached = within(what, seen.wait_for(enough)).await.is_ok();
        assert!(reached, "the watched store outlives its case");
    }
}

impl Store for Watched {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        self.seen.send_modify(|seen| seen.claims += 1);
        StoreFuture::boxed(async move {
            let answer = self.inner.claim(req).await;
            if let Ok(ClaimAnswer::InFlight(_)) = &answer {
                self.seen.send_modify(|seen| seen.in_flight += 1);
            }
            answer
        })
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        self.seen.send_modify(|seen| seen.completions += 1);
        self.inner.complete(claim, finished)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.release(claim)
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.renew(claim, lease)
    }
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        self.inner.renew_every(lease)
    }
}

type Refund = Result<Outcome<Refunded>, RefundError>;

/// Refunds `order` of `run` on a task of its own, waiting up to
/// [`PATIENCE`] for a holder elsewhere.
fn refund(
    store: &Arc<dyn Store>,
    run: &Run,
    order: &str,
    provider: &Arc<CountingProvider>,
) -> tokio::task::JoinHandle<Refund> {
    let call = refund_call(store, run, order, 42).wait(PATIENCE);
    let (order, provider) = (order.to_owned(), provider.clone());
    tokio::spawn(async move {
        call.run(async { Ok::<_, RefundError>(provider.refund(&order, 42)) })
            .await
    })
}

/// The result of a refund that had time left: it must have gone through.
async fn went_through(what: &str, refund: tokio::task::JoinHandle<Refund>) -> Outcome<Refunded> {
    let outcome = within(what, refund)
        .await
        .expect("the call's task")
        .unwrap_or_else(|e| panic!("{what} failed though it had time left: {e:?}"));
    assert!(outcome.is_fresh() || outcome.is_replay(), "{outcome:?}");
    outcome
}

async fn calls_before_during_and_after_a_restart_act_once_per_key(subject: Restartable) {
    let Restartable {
        store, mut server, ..
    } = subject;
    let watched = Watched::new(store);
    let store: Arc<dyn Store> = watched.clone();
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let orders: Vec<String> = (0..8).map(|order| format!("order-{order}")).collect();
    let (before, during) = orders.split_at(4);

    for order in before {
        let first = went_through("a call before", refund(&store, &run, order, &provider)).await;
        assert!(first.is_fresh(), "{first:?}");
    }

    server.stop().await;
    // While the server is down: every earlier order once more, and new
    // orders twice each, at once.
    let asked = watched.seen().claims;
    let mut calls = Vec::new();
    for order in before {
        calls.push(refund(&store, &run, order, &provider));
    }
    for order in during {
        calls.push(refund(&store, &run, order, &provider));
        calls.push(refund(&store, &run, order, &provider));
    }
    let n = calls.len();
    watched
        .until("every call reaching the stopped server", |seen| {
            seen.claims >= asked + n
        })
        .await;
    server.start().await;

    let mut fresh = 0;
    for call in calls {
        if went_through("a call made while the server was down", call)
            .await
            .is_fresh()
        {
            fresh += 1;
        }
    }
    assert_eq!(fresh, during.len(), "each new order acted once");
    for order in &orders {
        let again = went_through("a call after", refund(&store, &run, order, &provider)).await;
        assert!(again.is_replay(), "{again:?}");
    }
    assert_eq!(provider.refunds(), orders.len(), "one refund per order");
    drop((store, watched));
    drop(server);
}

async fn a_waiter_across_a_restart_ends_by_replay_and_a_completion_made_while_down_is_recorded(
    subject: Restartable,
) {
    let Restartable {
        store, mut server, ..
    } = subject;
    let unwatched = store;
    let watched = Watched::new(unwatched.clone());
    let store: Arc<dyn Store> = watched.clone();
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    // Two claims held across the restart, each with a waiter: one whose
    // action ends while the server is down, one after it is back.
    let hold = |order: &str| {
        Holder::start(
            refund_call(&store, &run, order, 42).lease(PATIENCE),
            provider.clone(),
            Ends::Refunding,
        )
    };
    let ends_down = hold("ends-down").await;
    let ends_back = hold("ends-back").await;
    let waiting = watched.seen().in_flight;
    let waits_down = refund(&store, &run, "ends-down", &provider);
    let waits_back = refund(&store, &run, "ends-back", &provider);
    watched
        .until("both waiters waiting", |seen| seen.in_flight >= waiting + 2)
        .await;

    server.stop().await;
    let completing = watched.seen().completions;
    let finished_down = tokio::spawn(ends_down.finish());
    watched
        .until("the completion reaching the stopped server", |seen| {
            seen.completions > completing
        })
        .await;
    server.start().await;

    let finished_down = within(
        "the completion made while the server was down",
        finished_down,
    )
    .await
    .expect("the holder's task")
    .expect("the completion made while the server was down, recorded once it is back");
    assert!(finished_down.is_fresh(), "{finished_down:?}");
    let replayed = went_through("the waiter on the claim finished while down", waits_down).await;
    assert!(replayed.is_replay(), "{replayed:?}");

    // A waiter that begins once the server is back, on a store it watches
    // alone: it waits on the wake-ups the store listens for since.
    let late = Watched::new(unwatched);
    let late_store: Arc<dyn Store> = late.clone();
    let waits_late = refund(&late_store, &run, "ends-back", &provider);
    late.until("the late waiter waiting", |seen| seen.in_flight >= 1)
        .await;

    let finished_back = ends_back.finish().await.expect("the holder's completion");
    assert!(finished_back.is_fresh(), "{finished_back:?}");
    for (waiter, waits) in [("across the restart", waits_back), ("since", waits_late)] {
        let woken = tokio::time::timeout(PROMPTLY, waits)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the waiter {waiter} slept on: not ended {PROMPTLY:?} after its holder's \
                     completion (a lost wake-up, and no recheck)"
                )
            })
            .expect("the waiter's task")
            .expect("the waiter");
        assert!(woken.is_replay(), "the waiter {waiter}: {woken:?}");
    }

    let again = went_through("a call after", refund(&store, &run, "ends-down", &provider)).await;
    assert!(again.is_replay(), "the completion made while down is kept");
    assert_eq!(provider.refunds(), 2, "one refund per held claim");
    drop((store, late_store, watched, late));
    drop(server);
}

/// An outcome left unknown before the server restarts is listed as pending
/// and resolved after it, on connections the restart cut: the next call
/// replays what the operator applied, and the provider refunded once.
async fn an_unknown_outcome_is_listed_and_resolved_after_a_restart(subject: Restartable) {
    let Restartable {
        store,
        records,
        mut server,
    } = subject;
    let Some(records) = records else {
        return;
    };
    let (provider, run) = (Arc::new(CountingProvider::default()), fresh_run());
    let lost = refund_call(&store, &run, "1182", 42)
        .run_classified(async {
            provider.refund("1182", 42);
            Err::<Refunded, _>(RefundError::TimedOut)
        })
        .await;
    assert_eq!(lost, Err(RefundError::TimedOut));

    server.stop().await;
    server.start().await;

    let pending = within("the pending list", records.list(&RecordQuery::pending()))
        .await
        .expect("the pending list, once the server is back");
    let key = refund_key(&run, "1182");
    assert!(
        pending.records.iter().any(|record| record.key == key),
        "the unknown outcome is pending"
    );
    let refunded = provider.refund_of("1182").expect("the provider's refund");
    within(
        "the resolve",
        records.resolve(&key, Resolution::applied(refunded)),
    )
    .await
    .expect("resolved once the server is back");
    let again = within(
        "a call after the resolve",
        refund_call(&store, &run, "1182", 42).run_classified(refunds(&provider, 42)),
    )
    .await
    .expect("the resolved refund");
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.value().map(|r| r.id.as_str()), Some("re_1"));
    assert_eq!(provider.refunds(), 1, "one refund");
    drop(server);
}

/// Restarts `server` under `store` `restarts` times and prints how long
/// after it was back the first calls went through (`measured: ...`): a
/// call made while it was down, which was trying again, and a new call
/// made the moment it was back. The server is back when `answers` first
/// says so (a connection of its own that reads a reply), asked every
/// millisecond from the stop on. Median and range over the restarts, for
/// a store's own restart figures.
pub async fn measure_first_calls_after_restarts<F, Fut>(
    store: Arc<dyn Store>,
    server: &mut impl Restart,
    answers: F,
    restarts: usize,
) where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let call = |order: String| {
        let (call, provider) = (refund_call(&store, &run, &order, 42), provider.clone());
        async move {
            let outcome = call.run(refunds(&provider, 42)).await;
            let ended = std::time::Instant::now();
            assert!(outcome.expect("a call").is_fresh());
            ended
        }
    };
    let (mut waiting, mut new) = (Vec::new(), Vec::new());
    for restart in 0..restarts {
        call(format!("before-{restart}")).await;
        server.stop().await;
        let during = tokio::spawn(call(format!("during-{restart}")));
        let back = {
            let (answers, after) = (answers.clone(), call(format!("after-{restart}")));
            tokio::spawn(async move {
                while !answers().await {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let back = std::time::Instant::now();
                (back, after.await)
            })
        };
        server.start().await;
        let (back, after) = within("the server back", back).await.expect("the probe");
        let during = within("the call made while down", during)
            .await
            .expect("the call's task");
        new.push(after.saturating_duration_since(back));
        waiting.push(during.saturating_duration_since(back));
    }
    let summary = |mut times: Vec<Duration>| {
        times.sort();
        let median = times[times.len() / 2];
        format!(
            "median {median:?}, range {:?} to {:?}",
            times[0],
            times[times.len() - 1]
        )
    };
    println!(
        "measured over {restarts} restarts, from the server answering again: a call made while \
         it was down went through after {}; a new call after {}",
        summary(waiting),
        summary(new)
    );
}
