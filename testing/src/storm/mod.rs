//! A duplicate storm: random schedules of asks, cancellations and store
//! faults thrown at a guarded tool, with the promises checked after each.
//!
//! Give [`Storm`] the tool (a closure that calls it with a store and an
//! [`Ask`]), what counts its real effect for an object (the stand-in
//! [`Provider`] its action calls, or a closure), and a store factory. It generates schedules:
//!
//! - bursts of identical asks, and asks with other arguments under the same
//!   key, started without waiting for each other; retries after errors and
//!   dropped calls (a later ask of the same object);
//! - callers dropped at chosen points: before their claim is answered,
//!   during their action (when it reaches the [`Storm::provider`], before
//!   the provider acts), once the provider acted (the effect happened, the
//!   answer was lost), during their completion;
//! - store faults, injected by a store wrapped around the one under test:
//!   a claim, completion, release or renewal that fails as unreachable,
//!   stalls, or is carried out but answers after its caller gave up;
//! - on stores whose leases run out, and short ones: holders that vanish
//!   once the provider acted (their later steps never reach the store, as
//!   for a killed process), completions paused until another caller took
//!   the claim over (a stale holder completing late), and leases let run
//!   out. A holder that acted and vanished is taken over once its lease
//!   ran out: a tool that keeps the guard's key from its provider acts
//!   twice, and is found there (and, on every store, by a caller dropped
//!   once the provider acted, then asked again).
//! - with [`Storm::provider_faults`]: the provider acts on a holder's call,
//!   then its connection drops or its answer times out, so the tool gets
//!   an error after which the action may have taken effect.
//!
//! After every schedule it checks:
//!
//! - **one effect**: the effect counted at most once per object;
//! - **one fresh result**: at most one caller per object told the action ran
//!   now ([`Outcome::Fresh`]);
//! - **told the truth**: each caller got a fresh result, a replay, a
//!   conflict, or the guard's error, which says whether the action ran
//!   ([`Error::action_ran`]);
//! - **bounded waits**: no caller took longer than the wait bound allows
//!   (the tool's `wait`, plus a lease and a pause where those are explored,
//!   plus 2 s for a busy machine);
//! - **nothing left held**: once every caller is gone and leases have
//!   passed, each key is claimed again, as its last holder asked, and must
//!   not be held.
//!
//! A failing schedule is shrunk (events dropped, troubles removed) to a
//! short one that still fails, and the report prints it with its seed and
//! each caller's key: `STORM_SEED=<seed> cargo test ...` runs that seed's
//! schedule alone again, as generated, without shrinking it. A trouble
//! lands at a moment the schedule's own steps mark (a store step reached, a
//! claim answered, the stand-in provider reached or done), never at one a
//! timer picks, so a seed fails the same way on every replay, on a loaded
//! machine too, and shrinking it gives the same schedule every time.
//!
//! Each schedule runs in a [`Run`](idempotent_tools::Run) of its own and
//! names its objects `storm0-<id>`, `storm1-<id>`, ..., so counters that
//! outlive a schedule never mix two schedules' effects. The tool must put
//! the object in its key: a key without it stops the storm at its first
//! claim, with [`Violation::KeyWithoutObject`].
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idempotent_tools::{MemoryStore, Outcome, Run, call::{Call, Key, Fingerprint, Policy}, current_key, store::Store};
//! use idempotent_tools_testing::{Provider, Refund, storm::{Ask, Storm}};
//!
//! /// The refund tool under test, built by hand around the store it is given.
//! async fn refund(provider: Provider, store: Arc<dyn Store>, ask: Ask, policy: Policy)
//!     -> Result<Outcome<Refund>, idempotent_tools::Error>
//! {
//!     let run = Run::current().ok_or(idempotent_tools::Error::MissingRun)?;
//!     let key = Key::builder().part("run", &run)?.literal(":refund:")?.part("order_id", &ask.object)?.finish()?;
//!     let usd = 40 + u64::from(ask.variant);
//!     let fingerprint = Fingerprint::builder().arg("usd", &usd)?.finish();
//!     Call::new("shop::refund", key).fingerprint(fingerprint).policy(policy).store(store)
//!         .run(async move {
//!             let key = current_key().map(|key| key.provider_key().into_owned());
//!             Ok(provider.refund(&ask.object, usd, key.as_deref()).await.expect("no lost replies here"))
//!         })
//!         .await
//! }
//!
//! # #[tokio::main(flavor = "multi_thread")]
//! # async fn main() {
//! let provider = Provider::with_delay(Duration::from_millis(1));
//! let policy = Policy { wait: Duration::from_secs(1), lease: Duration::from_millis(300), ..Policy::DEFAULT };
//! let tool = provider.clone();
//! let storm_policy = policy.clone();
//! Storm::new(move |store, ask| refund(tool.clone(), store, ask, policy.clone()))
//!     .provider(&provider)
//!     .store(|| async { Arc::new(MemoryStore::new()) })
//!     .policy(&storm_policy)
//!     .schedules(10)
//!     .run()
//!     .await
//!     .assert_ok();
//! # }
//! ```
//!
//! A tool whose error type wraps the guard's with `#[error(transparent)]`
//! hides it from the error chain: tell the storm where it is with
//! [`Storm::guard_error`].

mod checks;
mod faults;
mod handle;
mod report;
mod run;
mod schedule;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use idempotent_tools::call::Policy;
use idempotent_tools::store::{IntoStore, Store};
use idempotent_tools::{Error, Outcome};

use crate::provider::Provider;

pub use checks::{Answered, Caller, Violation};
pub use report::{Failure, Report, SEED_VAR};
pub use schedule::{Event, Schedule, Step, Trouble};

use run::Times;
use schedule::{LeftOut, Shape};

/// The seed a storm starts from unless told otherwise.
pub const DEFAULT_SEED: u64 = 0x5EED_0F57_0A11;

/// The longest lease a storm waits out: with a longer one (or a store whose
/// leases never run out) it leaves out the troubles that need one to pass.
pub const LONGEST_LEASE: Duration = Duration::from_secs(2);

/// How many schedules a failing one may run while it is shrunk.
pub const SHRINK_RUNS: usize = 300;

/// One ask of the tool: which object, and with which arguments.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Ask {
    /// The object asked about, to put in the key: `storm0-<id>`, ...
    pub object: String,
    /// 0 for the usual arguments; another number for other arguments under
    /// the same key (a different amount, say).
    pub variant: u8,
    /// The caller's number in its schedule, from 1.
    pub number: usize,
}

impl Ask {
    pub(crate) fn new(object: String, variant: u8, number: usize) -> Ask {
        Ask {
            object,
            variant,
            number,
        }
    }
}

type ToolFuture<T, E> = Pin<Box<dyn Future<Output = Result<Outcome<T>, E>> + Send>>;
type Tool<T, E> = Arc<dyn Fn(Arc<dyn Store>, Ask) -> ToolFuture<T, E> + Send + Sync>;
type FindGuardError<E> = Arc<dyn Fn(&E) -> Option<&Error> + Send + Sync>;
type StoreFactory =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + Send>> + Send + Sync>;

/// What a schedule runs with.
pub(crate) struct Setup<T, E> {
    tool: Tool<T, E>,
    effects: Arc<dyn Fn(&str) -> usize + Send + Sync>,
    store: StoreFactory,
    guard_error: FindGuardError<E>,
    /// The tool's error, as displayed.
    show: Arc<dyn Fn(&E) -> String + Send + Sync>,
    provider: Option<Provider>,
}

/// A duplicate storm on one tool; see the [module](self).
#[must_use = "a storm does nothing until `.run().await`"]
pub struct Storm<T, E> {
    setup: Setup<T, E>,
    schedules: usize,
    seed: u64,
    objects: u8,
    max_events: usize,
    wait: Duration,
    lease: Duration,
    replay: Option<u64>,
    provider_faults: bool,
    left_out: LeftOut,
}

impl<T, E> Storm<T, E>
where
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    /// A storm on `tool`, called with the store to use and the ask. Without
    /// [`Storm::effects`] nothing is counted; without [`Storm::store`] it
    /// runs on a fresh [`MemoryStore`](idempotent_tools::MemoryStore) per
    /// schedule.
    pub fn new<F, Fut>(tool: F) -> Storm<T, E>
    where
        F: Fn(Arc<dyn Store>, Ask) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Outcome<T>, E>> + Send + 'static,
    {
        Storm {
            setup: Setup {
                tool: Arc::new(move |store, ask| Box::pin(tool(store, ask))),
                effects: Arc::new(|_| 0),
                store: Arc::new(|| {
                    Box::pin(async {
                        Arc::new(idempotent_tools::MemoryStore::new()) as Arc<dyn Store>
                    })
                }),
                guard_error: Arc::new(|error: &E| in_chain(error)),
                show: Arc::new(|error: &E| error.to_string()),
                provider: None,
            },
            provider_faults: false,
            left_out: LeftOut::default(),
            schedules: 100,
            seed: DEFAULT_SEED,
            objects: 2,
            max_events: 8,
            wait: Policy::DEFAULT.wait,
            lease: Policy::DEFAULT.lease,
            replay: None,
        }
    }
}

impl<T, E> Storm<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    /// How many times the real effect happened for `object`: a provider's
    /// count of refunds on that order, say.
    pub fn effects(mut self, count: impl Fn(&str) -> usize + Send + Sync + 'static) -> Self {
        self.setup.effects = Arc::new(count);
        self
    }

    /// The stand-in provider the tool's action calls, with each ask's
    /// object as the order: the storm counts the effect as its refunds of
    /// the object (as [`Storm::effects`] would), and drops a caller during
    /// its action, or makes its holder vanish, at a moment the provider
    /// marks (its call arrived; the refund was made), so that a seed
    /// replays the same interleaving on every run. Without it the storm
    /// leaves those troubles out.
    pub fn provider(mut self, provider: &Provider) -> Self {
        let counted = provider.clone();
        self.setup.effects = Arc::new(move |object| counted.refunds_of(object));
        self.setup.provider = Some(provider.clone());
        self
    }

    /// Has the [`Storm::provider`] also fail a holder's call once it acted,
    /// as real providers do: the connection drops before the answer
    /// ([`Trouble::ConnectionDropsAfterActing`]), or the answer times out
    /// ([`Trouble::TimesOutAfterActing`]). The effect happened, and the tool
    /// gets an error after which it may have: a tool that releases its
    /// claim on it acts again on the retry (found where the provider
    /// [ignores keys](Provider::ignoring_keys)); one that
    /// [classifies](idempotent_tools::Classify) it and
    /// [verifies](idempotent_tools::call::Call::verify) with the provider
    /// does not. Off unless told, so that a seed gives the schedule it
    /// always gave.
    pub fn provider_faults(mut self) -> Self {
        self.provider_faults = true;
        self
    }

    /// Leaves `trouble` out of the schedules (up to 16 troubles): for a
    /// storm that holds a tool to the promises it makes, where a trouble
    /// breaks one it does not make. Say why beside it.
    pub fn leave_out(mut self, trouble: Trouble) -> Self {
        self.left_out.add(trouble);
        self
    }

    /// The store each schedule runs on, made fresh for it (or shared: each
    /// schedule's keys are its own).
    pub fn store<F, Fut, S>(mut self, open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = S> + Send + 'static,
        S: IntoStore,
    {
        let open = Arc::new(open);
        self.setup.store = Arc::new(move || {
            let open = Arc::clone(&open);
            Box::pin(async move { open().await.into_store() })
        });
        self
    }

    /// Where the guard's error is in the tool's error, when it is not in
    /// its [`source`](std::error::Error::source) chain (an
    /// `#[error(transparent)]` variant hides it).
    pub fn guard_error(
        mut self,
        find: impl Fn(&E) -> Option<&Error> + Send + Sync + 'static,
    ) -> Self {
        self.setup.guard_error = Arc::new(find);
        self
    }

    /// The wait and lease the tool's calls use, which the storm's times and
    /// bounds follow. Without it, the defaults ([`Policy::DEFAULT`]): leases
    /// too long to wait out.
    pub fn policy(mut self, policy: &Policy) -> Self {
        self.wait = policy.wait;
        self.lease = policy.lease;
        self
    }

    /// How many schedules to run (100 unless told).
    pub fn schedules(mut self, schedules: usize) -> Self {
        self.schedules = schedules;
        self
    }

    /// The seed of the first schedule ([`DEFAULT_SEED`] unless told); each
    /// schedule's own seed derives from it. [`SEED_VAR`] in the environment
    /// overrides it and runs that one schedule alone.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Runs the one schedule of this seed (a [`Failure::seed`]) as it was
    /// generated, without shrinking it, as [`SEED_VAR`] in the environment
    /// does. Its troubles land at moments the schedule's own steps mark, so
    /// it fails the same way on every replay.
    pub fn replay(mut self, seed: u64) -> Self {
        self.replay = Some(seed);
        self
    }

    /// How many objects (keys) a schedule asks about, 1 to 10 (2 unless told).
    pub fn objects(mut self, objects: u8) -> Self {
        self.objects = objects.clamp(1, 10);
        self
    }

    /// The most events in a schedule (8 unless told).
    pub fn events(mut self, events: usize) -> Self {
        self.max_events = events.max(1);
        self
    }

    /// Runs the schedules, and shrinks the first that breaks a promise.
    pub async fn run(self) -> Report {
        let started = Instant::now();
        let probe = (self.setup.store)().await;
        let short_leases = probe.renew_every(self.lease).is_some() && self.lease <= LONGEST_LEASE;
        drop(probe);
        let times = Times {
            wait: self.wait,
            lease: self.lease,
            short_leases,
        };
        let shape = Shape {
            objects: self.objects,
            max_events: self.max_events,
            short_leases,
            provider: self.setup.provider.is_some(),
            provider_faults: self.provider_faults && self.setup.provider.is_some(),
            left_out: self.left_out,
        };
        let from_env = std::env::var(SEED_VAR)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let replay = self.replay.or(from_env);
        let seeds: Vec<u64> = match replay {
            Some(seed) => vec![seed],
            None => (0..self.schedules as u64)
                .map(|n| report::nth_seed(self.seed, n))
                .collect(),
        };
        let mut report = Report {
            short_leases,
            ..Report::default()
        };
        for seed in seeds {
            let mut tree = report::tree(shape, seed);
            let original = tree.current();
            report.count(&original);
            let ran = run::schedule(&self.setup, times, &original).await;
            if ran.violations.is_empty() {
                continue;
            }
            let stray = ran
                .violations
                .iter()
                .any(|v| matches!(v, Violation::KeyWithoutObject { .. }));
            report.failure = Some(if replay.is_some() || stray {
                Failure {
                    seed,
                    shrunk: original.clone(),
                    original,
                    violations: ran.violations,
                    callers: ran.callers,
                    shrink_runs: 0,
                    shrunk_here: false,
                }
            } else {
                self.shrink(times, seed, original, ran, &mut *tree).await
            });
            break;
        }
        report.took = started.elapsed();
        report
    }

    /// Shrinks a failing schedule as proptest does: simpler while it still
    /// fails, back toward the last failure when it passes.
    async fn shrink(
        &self,
        times: Times,
        seed: u64,
        original: Schedule,
        ran: run::Ran,
        tree: &mut dyn proptest::strategy::ValueTree<Value = Schedule>,
    ) -> Failure {
        let mut failure = Failure {
            seed,
            shrunk: original.clone(),
            original,
            violations: ran.violations,
            callers: ran.callers,
            shrink_runs: 0,
            shrunk_here: true,
        };
        let mut simpler = tree.simplify();
        while simpler && failure.shrink_runs < SHRINK_RUNS {
            let candidate = tree.current();
            let ran = run::schedule(&self.setup, times, &candidate).await;
            failure.shrink_runs += 1;
            if ran.violations.is_empty() {
                simpler = tree.complicate();
            } else {
                failure.shrunk = candidate;
                failure.violations = ran.violations;
                failure.callers = ran.callers;
                simpler = tree.simplify();
            }
        }
        failure
    }
}

/// The guard's error, where it is in `error`'s source chain (`error` itself
/// included).
fn in_chain<'a, E: std::error::Error + 'static>(error: &'a E) -> Option<&'a Error> {
    let mut at: Option<&'a (dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = at {
        if let Some(guard) = error.downcast_ref::<Error>() {
            return Some(guard);
        }
        at = error.source();
    }
    None
}
