//! Each store held to the model of the claim protocol
//! (`idempotent-tools-model`), step by step: random sequences of claims
//! (with the same or other arguments, with a live lease or one that has run
//! out), completions (of current, stale and already completed claims),
//! releases and renewals run against a real store and against the model's
//! [`KeyStore`], and every answer must be the model's: the claim's variant,
//! its fence and whether it took over, the replayed state and value, the
//! conflict's first result, and whether a completion, release or renewal
//! was accepted or refused by the fence. A wait on a claim in flight must
//! end once that claim is completed or released.
//!
//! Time is not waited for: a lease of zero has run out the moment it is
//! written (as the conformance suite's crashed holders do), and a live lease
//! lasts a minute. The memory store's leases never run out, and its model
//! says so.
//!
//! The sequences come from a fixed seed, so every run checks the same
//! cases. Postgres and Redis need `IDEMPOTENT_POSTGRES_URL` and
//! `IDEMPOTENT_REDIS_URL`: without them their cases are reported as ignored,
//! except in CI, where they fail.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::call::{ConflictReason, Key};
use idempotent_tools::records::RecordState;
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::tokio_postgres::{self, Config, NoTls};
use idempotent_tools::store::redis::redis;
use idempotent_tools::store::{
    Claim, ClaimAnswer, ClaimRequest, Completion, RecordValue, Store, StoreError, StoreFuture,
    StoreResult, Wait,
};
use idempotent_tools::{MemoryStore, RedisStore, SqliteStore};
use idempotent_tools_model::store::{
    Answer, Args, ClaimRef, Ending, KeyStore, LeaseLost, Leases, Owner, Slot, Tick, Value,
};
use idempotent_tools_testing::conformance::kit::{self, fresh_run, refund_key, request, usd};
use libtest_mimic::{Arguments, Completion as Trial, Failed};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};
use proptest_state_machine::ReferenceStateMachine;

const POSTGRES_URL: &str = "IDEMPOTENT_POSTGRES_URL";
const REDIS_URL: &str = "IDEMPOTENT_REDIS_URL";

/// Sequences per store, and steps in each.
const CASES: u32 = 256;
const STEPS: std::ops::Range<usize> = 1..32;

/// A live lease, in the store: longer than any case runs.
const LIVE: Duration = Duration::from_secs(60);

/// A lease as a step asks for it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lease {
    /// Run out the moment it is written: its holder stands for one that
    /// crashed or stalled.
    RunOut,
    /// Live for the whole case.
    Live,
}

impl Lease {
    fn ticks(self) -> Tick {
        match self {
            Lease::RunOut => 0,
            Lease::Live => Tick::MAX,
        }
    }

    fn duration(self) -> Duration {
        match self {
            Lease::RunOut => Duration::ZERO,
            Lease::Live => LIVE,
        }
    }
}

/// One step of a sequence. A claim is named by the order in which the store
/// granted it; any claim granted so far may complete, release or renew,
/// stale or not.
#[derive(Clone, Debug)]
enum Step {
    Claim { args: Args, lease: Lease },
    Complete { claim: usize },
    Release { claim: usize },
    Renew { claim: usize, lease: Lease },
}

/// The model's side: the key in the store, and the claims granted so far.
#[derive(Clone, Debug)]
struct Reference {
    store: KeyStore,
    claims: Vec<ClaimRef>,
    next_owner: Owner,
}

/// What a step answers, in the model's words.
#[derive(Clone, Debug, PartialEq)]
enum Expected {
    Claim(Answer),
    Step(Result<(), LeaseLost>),
}

/// How the `n`th claim granted ends when it completes, and its value:
/// always the same for the same claim, as a completion tried again is.
fn ending_of(claim: usize) -> (Ending, Value) {
    let ending = match claim % 4 {
        1 => Ending::Failed,
        3 => Ending::Unknown,
        _ => Ending::Done,
    };
    (ending, claim as Value + 1)
}

impl Reference {
    /// Applies `step` to the model, and returns its answer.
    fn step(&mut self, step: &Step) -> Expected {
        match *step {
            Step::Claim { args, lease } => {
                let owner = self.next_owner;
                self.next_owner += 1;
                let answer = self.store.claim(owner, args, lease.ticks());
                if let Answer::Claimed { fence, .. } = answer {
                    self.claims.push(ClaimRef { owner, fence });
                }
                Expected::Claim(answer)
            }
            Step::Complete { claim } => {
                let (ending, value) = ending_of(claim);
                Expected::Step(self.store.complete(self.claims[claim], ending, value))
            }
            Step::Release { claim } => Expected::Step(self.store.release(self.claims[claim])),
            Step::Renew { claim, lease } => {
                Expected::Step(self.store.renew(self.claims[claim], lease.ticks()))
            }
        }
    }
}

/// The model of a store whose leases run out (`EXPIRE`) or never do.
struct Model<const EXPIRE: bool>;

impl<const EXPIRE: bool> ReferenceStateMachine for Model<EXPIRE> {
    type State = Reference;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Reference> {
        let leases = if EXPIRE {
            Leases::Expire
        } else {
            Leases::Never
        };
        Just(Reference {
            store: KeyStore::new(leases),
            claims: Vec::new(),
            next_owner: 1,
        })
        .boxed()
    }

    fn transitions(state: &Reference) -> BoxedStrategy<Step> {
        let lease = prop_oneof![Just(Lease::RunOut), Just(Lease::Live)];
        let claim = (0..2u8, lease.clone()).prop_map(|(args, lease)| Step::Claim { args, lease });
        if state.claims.is_empty() {
            return claim.boxed();
        }
        let granted = 0..state.claims.len();
        prop_oneof![
            3 => claim,
            3 => granted.clone().prop_map(|claim| Step::Complete { claim }),
            1 => granted.clone().prop_map(|claim| Step::Release { claim }),
            1 => (granted, lease).prop_map(|(claim, lease)| Step::Renew { claim, lease }),
        ]
        .boxed()
    }

    fn preconditions(state: &Reference, step: &Step) -> bool {
        match *step {
            Step::Claim { .. } => true,
            Step::Complete { claim } | Step::Release { claim } | Step::Renew { claim, .. } => {
                claim < state.claims.len()
            }
        }
    }

    fn apply(mut state: Reference, step: &Step) -> Reference {
        state.step(step);
        state
    }
}

/// The store's side of a sequence: its key, and the claims it granted.
struct Real<'a> {
    store: &'a dyn Store,
    key: Key,
    claims: Vec<Claim>,
    /// The waits of claims answered in flight, each with the claim (by
    /// the order of its grant) it waits on.
    waits: Vec<(usize, Wait)>,
    /// The wait of the last step, if it answered in flight.
    wait: Option<Wait>,
}

fn json(value: &RecordValue) -> String {
    value.to_json().map(|j| j.into_owned()).unwrap_or_default()
}

fn value_json(ending: Ending, value: Value) -> String {
    match ending {
        Ending::Unknown => "null".to_owned(),
        _ => value.to_string(),
    }
}

impl Real<'_> {
    fn request(&self, args: Args, lease: Lease) -> ClaimRequest<'_> {
        ClaimRequest {
            fingerprint: usd(42 - u64::from(args)),
            ..request(&self.key, lease.duration())
        }
    }

    /// Runs `step` against the store, and returns its answer in the
    /// model's words (or why it has none).
    async fn step(&mut self, step: &Step) -> Result<Expected, String> {
        let refused = |result: Result<(), StoreError>| match result {
            Ok(()) => Ok(Expected::Step(Ok(()))),
            Err(StoreError::LeaseLost) => Ok(Expected::Step(Err(LeaseLost))),
            Err(other) => Err(format!("the store failed: {other}")),
        };
        match *step {
            Step::Claim { args, lease } => {
                let answer = self
                    .store
                    .claim(self.request(args, lease))
                    .await
                    .map_err(|e| format!("the claim failed: {e}"))?;
                Ok(Expected::Claim(match answer {
                    ClaimAnswer::Claimed(claim) => {
                        let answer = Answer::Claimed {
                            fence: claim.fence as u32,
                            taken_over: claim.taken_over,
                        };
                        self.claims.push(claim);
                        answer
                    }
                    ClaimAnswer::InFlight(wait) => {
                        self.wait = Some(wait);
                        Answer::InFlight
                    }
                    ClaimAnswer::Completed(finished) => {
                        let ending = match finished.state {
                            RecordState::Done => Ending::Done,
                            RecordState::Failed => Ending::Failed,
                            RecordState::Unknown => Ending::Unknown,
                            other => return Err(format!("replayed a {other} record")),
                        };
                        Answer::Completed {
                            ending,
                            value: parse_value(&json(&finished.value))?,
                        }
                    }
                    ClaimAnswer::Conflict {
                        reason: ConflictReason::Arguments,
                        first,
                    } => Answer::Conflict {
                        first: first.map(|v| parse_value(&json(&v))).transpose()?,
                    },
                    ClaimAnswer::Conflict { reason, .. } => {
                        return Err(format!("a conflict on {reason:?}"));
                    }
                }))
            }
            Step::Complete { claim } => {
                let (ending, value) = ending_of(claim);
                let finished = Completion {
                    state: match ending {
                        Ending::Done => RecordState::Done,
                        Ending::Failed => RecordState::Failed,
                        Ending::Unknown => RecordState::Unknown,
                    },
                    value: RecordValue::from_json(value_json(ending, value)),
                    completed_at: std::time::SystemTime::now(),
                };
                refused(self.store.complete(&self.claims[claim], finished).await)
            }
            Step::Release { claim } => refused(self.store.release(&self.claims[claim]).await),
            Step::Renew { claim, lease } => refused(
                self.store
                    .renew(&self.claims[claim], lease.duration())
                    .await,
            ),
        }
    }
}

/// A recorded value as the model writes it: a number, or 0 for the JSON
/// `null` of an unknown outcome.
fn parse_value(json: &str) -> Result<Value, String> {
    if json == "null" {
        return Ok(0);
    }
    json.parse()
        .map_err(|_| format!("a recorded value the model never wrote: {json}"))
}

/// The model's answer with the value of an unknown outcome read as the
/// store reads it back.
fn as_read(expected: Expected) -> Expected {
    match expected {
        Expected::Claim(Answer::Completed {
            ending: Ending::Unknown,
            ..
        }) => Expected::Claim(Answer::Completed {
            ending: Ending::Unknown,
            value: 0,
        }),
        other => other,
    }
}

/// What kind of answer the model gave, so that a run can show it met each
/// (and every wait on a claim in flight that ended).
fn kind(expected: &Expected, step: &Step) -> &'static str {
    match (expected, step) {
        (
            Expected::Claim(Answer::Claimed {
                taken_over: false, ..
            }),
            _,
        ) => "claimed",
        (
            Expected::Claim(Answer::Claimed {
                taken_over: true, ..
            }),
            _,
        ) => "taken over",
        (Expected::Claim(Answer::InFlight), _) => "in flight",
        (
            Expected::Claim(Answer::Completed {
                ending: Ending::Done,
                ..
            }),
            _,
        ) => "replayed done",
        (
            Expected::Claim(Answer::Completed {
                ending: Ending::Failed,
                ..
            }),
            _,
        ) => "replayed failed",
        (
            Expected::Claim(Answer::Completed {
                ending: Ending::Unknown,
                ..
            }),
            _,
        ) => "replayed unknown",
        (Expected::Claim(Answer::Conflict { first: Some(_) }), _) => "conflict with a result",
        (Expected::Claim(Answer::Conflict { first: None }), _) => "conflict",
        (Expected::Step(Ok(())), Step::Complete { .. }) => "completed",
        (Expected::Step(Err(_)), Step::Complete { .. }) => "completion refused",
        (Expected::Step(Ok(())), Step::Release { .. }) => "released",
        (Expected::Step(Err(_)), Step::Release { .. }) => "release refused",
        (Expected::Step(Ok(())), _) => "renewed",
        (Expected::Step(Err(_)), _) => "renewal refused",
    }
}

/// The kinds of answer every run must meet, and those only a store whose
/// leases run out can give.
const KINDS: [&str; 14] = [
    "claimed",
    "a wait ended",
    "in flight",
    "replayed done",
    "replayed failed",
    "replayed unknown",
    "conflict with a result",
    "conflict",
    "completed",
    "completion refused",
    "released",
    "release refused",
    "renewed",
    "renewal refused",
];
const EXPIRING_KINDS: [&str; 1] = ["taken over"];

/// Runs the sequences against the store `open` returns, on a runtime of
/// their own, each sequence on a key of its own, and checks that they met
/// every kind of answer.
fn agree<const EXPIRE: bool, S, F>(open: impl FnOnce() -> F) -> Result<(), Failed>
where
    S: Store,
    F: Future<Output = S>,
{
    let met = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("a runtime: {e}")))?;
    let store: Arc<S> = Arc::new(runtime.block_on(open()));
    let config = RunnerConfig {
        cases: CASES,
        failure_persistence: None,
        ..RunnerConfig::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let result = runner.run(
        &Model::<EXPIRE>::sequential_strategy(STEPS),
        |(mut reference, steps, seen)| {
            let mut real = Real {
                store: &*store,
                key: refund_key(&fresh_run(), "1182"),
                claims: Vec::new(),
                waits: Vec::new(),
                wait: None,
            };
            for (n, step) in steps.iter().enumerate() {
                if let Some(seen) = &seen {
                    seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                let holder = match reference.store.slot {
                    Slot::Held(held) => reference.claims.iter().position(|c| c.owner == held.owner),
                    _ => None,
                };
                let expected = as_read(reference.step(step));
                met.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(kind(&expected, step));
                let got = runtime
                    .block_on(real.step(step))
                    .map_err(|e| TestCaseError::fail(format!("step {n}, {step:?}: {e}")))?;
                prop_assert_eq!(
                    &got,
                    &expected,
                    "step {} of {:?}: the store answered {:?}, the model {:?}",
                    n,
                    steps,
                    got,
                    expected
                );
                // A wait on a claim in flight ends once its holder completes
                // or releases.
                if let (Some(wait), Some(holder)) = (real.wait.take(), holder) {
                    real.waits.push((holder, wait));
                }
                if let (
                    Step::Complete { claim } | Step::Release { claim },
                    Expected::Step(Ok(())),
                ) = (step, &expected)
                {
                    let (woken, waiting) = std::mem::take(&mut real.waits)
                        .into_iter()
                        .partition(|(holder, _)| holder == claim);
                    real.waits = waiting;
                    for (_, wait) in woken {
                        runtime
                            .block_on(async { tokio::time::timeout(kit::PATIENCE, wait).await })
                            .map_err(|_| {
                                TestCaseError::fail(format!(
                                    "step {n} of {steps:?}: a wait on the claim did not end"
                                ))
                            })?;
                        met.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .insert("a wait ended");
                    }
                }
            }
            Ok(())
        },
    );
    drop(store);
    result.map_err(|e| Failed::from(e.to_string()))?;
    let met = met
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let expiring = if EXPIRE { &EXPIRING_KINDS[..] } else { &[] };
    let missed: Vec<_> = KINDS
        .iter()
        .chain(expiring)
        .filter(|kind| !met.contains(*kind))
        .collect();
    if !missed.is_empty() {
        return Err(format!("the sequences never met: {missed:?}").into());
    }
    Ok(())
}

fn memory() -> Result<(), Failed> {
    agree::<false, _, _>(|| async { MemoryStore::new() })
}

/// A memory store that renews any claim, held or not: a change the model
/// does not allow.
struct RenewsAnything(MemoryStore);

impl Store for RenewsAnything {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        self.0.claim(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        self.0.complete(claim, finished)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.0.release(claim)
    }
    fn renew<'a>(&'a self, _: &'a Claim, _: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::ready(Ok(()))
    }
}

fn a_store_the_model_does_not_allow_is_caught() -> Result<(), Failed> {
    match agree::<false, _, _>(|| async { RenewsAnything(MemoryStore::new()) }) {
        Err(failed) => {
            let message = failed.message().unwrap_or_default();
            if message.contains("Renew") {
                Ok(())
            } else {
                Err(format!("caught, but not at a renewal: {message}").into())
            }
        }
        Ok(()) => Err("a store that renews any claim agreed with the model".into()),
    }
}

fn sqlite() -> Result<(), Failed> {
    let dir = tempfile::Builder::new()
        .prefix("idempotent-model-")
        .tempdir()
        .map_err(|e| Failed::from(format!("a temporary directory: {e}")))?;
    let path = dir.path().join("claims.db");
    agree::<true, _, _>(|| async move { SqliteStore::open(path).expect("open the store") })
}

async fn postgres_admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("Postgres at {POSTGRES_URL} must be reachable: {e}"));
    tokio::spawn(connection);
    client
}

fn postgres(url: String) -> Result<(), Failed> {
    let schema = format!("idempotent_model_{}", kit::unique_id());
    let agreed = agree::<true, _, _>(|| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            postgres_admin(&url)
                .await
                .batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .expect("create a schema");
            let mut config: Config = url.parse().expect("a Postgres URL");
            config.options(format!("-c search_path={schema}"));
            let store = PostgresStoreBuilder::from_config(config)
                .connect_lazy()
                .expect("a store");
            store.migrate().await.expect("migrate");
            store
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("a runtime: {e}")))?;
    runtime.block_on(async {
        let _ = postgres_admin(&url)
            .await
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    });
    agreed
}

fn redis_store(url: String) -> Result<(), Failed> {
    let prefix = format!("idempotent-model:{}:", kit::unique_id());
    let agreed = agree::<true, _, _>(|| {
        let (url, prefix) = (url.clone(), prefix.clone());
        async move {
            RedisStore::builder(url.as_str())
                .prefix(prefix.as_str())
                .connect()
                .await
                .unwrap_or_else(|e| panic!("Redis at {REDIS_URL} must be reachable: {e}"))
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("a runtime: {e}")))?;
    runtime.block_on(async {
        let Ok(client) = redis::Client::open(url.as_str()) else {
            return;
        };
        let Ok(mut admin) = client.get_multiplexed_async_connection().await else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut admin)
            .await
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<i64, _> = redis::cmd("DEL").arg(keys).query_async(&mut admin).await;
        }
    });
    agreed
}

/// A trial that runs when the environment variable `needs` names its
/// server, is ignored when it is not set, and fails in CI without it.
fn needs(
    name: &str,
    needs: &'static str,
    case: fn(String) -> Result<(), Failed>,
) -> libtest_mimic::Trial {
    libtest_mimic::Trial::ignorable_test(name, move || match std::env::var(needs) {
        Ok(url) => case(url).map(|()| Trial::Completed),
        Err(_) if std::env::var_os("CI").is_some() => {
            Err(format!("{needs} must be set in CI: this case needs its server").into())
        }
        Err(_) => Ok(Trial::ignored_with(format!("needs {needs}"))),
    })
}

fn main() {
    let trials = vec![
        libtest_mimic::Trial::test("the_memory_store_answers_as_the_model", memory),
        libtest_mimic::Trial::test("the_sqlite_store_answers_as_the_model", sqlite),
        libtest_mimic::Trial::test(
            "a_store_the_model_does_not_allow_is_caught",
            a_store_the_model_does_not_allow_is_caught,
        ),
        needs(
            "the_postgres_store_answers_as_the_model",
            POSTGRES_URL,
            postgres,
        ),
        needs(
            "the_redis_store_answers_as_the_model",
            REDIS_URL,
            redis_store,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), trials).exit()
}
