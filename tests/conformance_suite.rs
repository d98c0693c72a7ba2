//! The conformance suite can fail: a store that breaks a promise fails the
//! case that proves it, and a store that does not offer a step has the case
//! reported ignored, never passed.
//!
//! Each self-test runs one case of the suite against a store made wrong on
//! purpose, and reads the suite's own conclusion. The restart cases run
//! on a server in memory that keeps its data across a restart, or not.

mod harness;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use idempotent_tools::{
    MemoryStore,
    call::Key,
    records::{Forget, Record, RecordCount, RecordPage, RecordQuery, Records, Resolution},
    store::{Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreFuture, StoreResult},
};
use idempotent_tools_testing::conformance::libtest_mimic::{self, Arguments, Conclusion};
use idempotent_tools_testing::conformance::{Restart, Scope, Suite};

/// How a store under self-test is made wrong.
#[derive(Clone, Copy)]
enum Flaw {
    /// None: it hands every step to a memory store.
    None,
    /// Every claim is made under a key of its own, so duplicates all act.
    LetsDuplicatesThrough,
    /// A completion releases the claim instead of recording the result.
    ForgetsCompletions,
    /// It offers no listing, reading or counting of records.
    OffersNoInspection,
    /// Records vanish when their retention runs out, and no purge job
    /// deletes anything: a store that retains by key expiry.
    RetainsByExpiry,
}

struct Flawed {
    inner: MemoryStore,
    flaw: Flaw,
    keys: AtomicU64,
}

fn flawed(flaw: Flaw) -> Suite<Flawed> {
    Suite::new(move |_: Scope| async move {
        Flawed {
            inner: MemoryStore::new(),
            flaw,
            keys: AtomicU64::new(0),
        }
    })
    .within_one_process()
    .racing_callers(20)
    .with_records()
}

/// A memory store offering the claim protocol and nothing else.
struct ProtocolOnly(MemoryStore);

impl Store for ProtocolOnly {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        self.0.claim(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        done: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        self.0.complete(claim, done)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.0.release(claim)
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        self.0.renew(claim, lease)
    }
}

impl Store for Flawed {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        let Flaw::LetsDuplicatesThrough = self.flaw else {
            return self.inner.claim(req);
        };
        let n = self.keys.fetch_add(1, Ordering::Relaxed);
        let own = Key::builder()
            .part("key", req.key.as_str())
            .and_then(|b| b.literal(":"))
            .and_then(|b| b.part("n", &n))
            .and_then(|b| b.finish())
            .expect("a key of its own");
        StoreFuture::boxed(async move { self.inner.claim(ClaimRequest { key: &own, ..req }).await })
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        done: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        match self.flaw {
            Flaw::ForgetsCompletions => self.inner.release(claim),
            _ => self.inner.complete(claim, done),
        }
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.release(claim)
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.renew(claim, lease)
    }
}

impl Records for Flawed {
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        match self.flaw {
            Flaw::RetainsByExpiry => StoreFuture::ready(Ok(0)),
            _ => self.inner.purge_expired(),
        }
    }
    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        self.inner.forget_with(key, how)
    }
    fn resolve<'a>(&'a self, key: &'a Key, how: Resolution) -> StoreFuture<'a, StoreResult<()>> {
        match self.flaw {
            Flaw::OffersNoInspection => StoreFuture::ready(Err(unsupported("resolve"))),
            _ => self.inner.resolve(key, how),
        }
    }
    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        match self.flaw {
            Flaw::OffersNoInspection => StoreFuture::ready(Err(unsupported("list"))),
            _ => self.inner.list(query),
        }
    }
    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        match self.flaw {
            Flaw::OffersNoInspection => StoreFuture::ready(Err(unsupported("inspect"))),
            Flaw::RetainsByExpiry => StoreFuture::boxed(async move {
                let record = self.inner.inspect(key).await?;
                let now = SystemTime::now();
                Ok(record.filter(|r| r.expires_at.is_none_or(|at| at > now)))
            }),
            _ => self.inner.inspect(key),
        }
    }
    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        match self.flaw {
            Flaw::OffersNoInspection => StoreFuture::ready(Err(unsupported("count"))),
            _ => self.inner.count(),
        }
    }
}

fn unsupported(step: &'static str) -> idempotent_tools::store::StoreError {
    idempotent_tools::store::StoreError::Unsupported(step)
}

/// A server in memory that can be stopped and started again: while it is
/// stopped, every step waits until it is back, as a durable store's steps
/// try again over a broken connection. One that does not keep its data
/// starts again empty.
struct InMemoryServer {
    data: Mutex<Arc<MemoryStore>>,
    up: watch::Sender<bool>,
    keeps_data: bool,
}

impl InMemoryServer {
    fn new(keeps_data: bool) -> Arc<InMemoryServer> {
        Arc::new(InMemoryServer {
            data: Mutex::new(Arc::new(MemoryStore::new())),
            up: watch::Sender::new(true),
            keeps_data,
        })
    }

    /// The server's data, once it is up.
    async fn reached(&self) -> Arc<MemoryStore> {
        let _ = self.up.subscribe().wait_for(|up| *up).await;
        self.data.lock().expect("data").clone()
    }
}

/// A store on an [`InMemoryServer`].
struct OnServer(Arc<InMemoryServer>);

impl Store for OnServer {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        StoreFuture::boxed(async move { self.0.reached().await.claim(req).await })
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        done: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move { self.0.reached().await.complete(claim, done).await })
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move { self.0.reached().await.release(claim).await })
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        StoreFuture::boxed(async move { self.0.reached().await.renew(claim, lease).await })
    }
}

/// The restart cases' hold on an [`InMemoryServer`].
struct Restarts(Arc<InMemoryServer>);

impl Restart for Restarts {
    async fn stop(&mut self) {
        self.0.up.send_replace(false);
    }

    async fn start(&mut self) {
        if !self.0.keeps_data {
            *self.0.data.lock().expect("data") = Arc::new(MemoryStore::new());
        }
        self.0.up.send_replace(true);
    }
}

/// The suite, with its restart cases run on an [`InMemoryServer`].
fn on_a_server(keeps_data: bool) -> Suite<OnServer> {
    Suite::new(|_: Scope| async { OnServer(InMemoryServer::new(true)) })
        .within_one_process()
        .restarting(move |_: Scope| async move {
            let server = InMemoryServer::new(keeps_data);
            (OnServer(server.clone()), Restarts(server))
        })
}

const RESTART_CASES: [&str; 2] = [
    "calls_before_during_and_after_a_restart_act_once_per_key",
    "a_waiter_across_a_restart_ends_by_replay_and_a_completion_made_while_down_is_recorded",
];

fn the_restart_cases_are_ignored_without_a_server_to_restart() {
    for case in RESTART_CASES {
        let ran = run_case(flawed(Flaw::None), case);
        assert_eq!(counts(&ran), (0, 0, 1), "{case}");
    }
}

fn a_server_that_keeps_its_data_passes_the_restart_cases() {
    for case in RESTART_CASES {
        let ran = run_case(on_a_server(true), case);
        assert_eq!(counts(&ran), (1, 0, 0), "{case}");
    }
}

fn a_server_that_forgets_its_data_on_a_restart_fails_the_restart_case() {
    let ran = run_case(on_a_server(false), RESTART_CASES[0]);
    assert_eq!(counts(&ran), (0, 1, 0));
}

/// Runs the suite's case `case` alone against `suite`'s store.
/// Runs one case of `suite` and returns its conclusion. Its report (a
/// failure is the expected outcome here) goes to a file of its own, not to
/// this run's output.
fn run_case<S: Store>(suite: Suite<S>, case: &str) -> Conclusion {
    let log = tempfile::NamedTempFile::new().expect("a file for the case's report");
    let args = Arguments {
        filter: Some(case.to_owned()),
        exact: true,
        test_threads: Some(1),
        quiet: true,
        logfile: Some(log.path().to_string_lossy().into_owned()),
        ..Arguments::default()
    };
    libtest_mimic::run(&args, suite.trials())
}

/// The flawed stores fail the suite's cases on purpose, and each self-test
/// reads that from the suite's conclusion: the panics raised in the suite's
/// own code are expected and not printed. Any other panic is.
fn quiet_expected_failures() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_suite = info
            .location()
            .is_some_and(|at| at.file().replace('\\', "/").contains("src/conformance/"));
        if !in_suite {
            report(info);
        }
    }));
}

/// The counts of a conclusion: (passed, failed, ignored).
fn counts(conclusion: &Conclusion) -> (u64, u64, u64) {
    (
        conclusion.num_passed,
        conclusion.num_failed,
        conclusion.num_ignored,
    )
}

fn a_store_that_lets_duplicates_through_fails_the_suite() {
    for case in [
        "concurrent_identical_calls_act_once",
        "racing_claims_from_many_connections_check_tool_and_arguments_on_every_path",
    ] {
        let ran = run_case(flawed(Flaw::LetsDuplicatesThrough), case);
        assert_eq!(counts(&ran), (0, 1, 0), "{case}");
    }
}

fn a_store_that_forgets_completions_fails_the_suite() {
    for case in [
        "a_repeat_after_completion_replays_the_first_result",
        "a_failed_record_replays_its_error_without_acting",
        "a_replay_is_byte_identical_to_the_recorded_json",
    ] {
        let ran = run_case(flawed(Flaw::ForgetsCompletions), case);
        assert_eq!(counts(&ran), (0, 1, 0), "{case}");
    }
}

fn a_store_offering_only_the_protocol_passes_it_and_has_the_record_cases_ignored() {
    let suite = || {
        Suite::new(|_: Scope| async { ProtocolOnly(MemoryStore::new()) })
            .within_one_process()
            .racing_callers(20)
    };
    for case in [
        "concurrent_identical_calls_act_once",
        "a_repeat_after_completion_replays_the_first_result",
        "other_arguments_after_completion_conflict_with_the_first_result",
    ] {
        assert_eq!(counts(&run_case(suite(), case)), (1, 0, 0), "{case}");
    }
    for case in [
        "records_are_listed_by_state_tool_and_run",
        "a_purge_never_removes_a_held_claim",
        "forgetting_removes_a_finished_record_but_never_a_live_claim",
    ] {
        assert_eq!(counts(&run_case(suite(), case)), (0, 0, 1), "{case}");
    }
}

fn the_same_cases_pass_on_a_store_without_the_flaw() {
    for case in [
        "concurrent_identical_calls_act_once",
        "a_repeat_after_completion_replays_the_first_result",
        "a_failed_record_replays_its_error_without_acting",
        "a_replay_is_byte_identical_to_the_recorded_json",
        "racing_claims_from_many_connections_check_tool_and_arguments_on_every_path",
    ] {
        let ran = run_case(flawed(Flaw::None), case);
        assert_eq!(counts(&ran), (1, 0, 0), "{case}");
    }
}

fn a_step_the_store_does_not_offer_is_reported_ignored_not_passed() {
    for case in [
        "records_are_listed_by_state_tool_and_run",
        "one_record_reads_in_full",
        "counts_are_by_tool_and_state",
    ] {
        let ran = run_case(flawed(Flaw::OffersNoInspection), case);
        assert_eq!(counts(&ran), (0, 0, 1), "{case}");
    }
}

fn a_store_that_retains_by_expiry_is_checked_for_expiry_instead_of_purges() {
    let suite = || flawed(Flaw::RetainsByExpiry).retaining_by_expiry();
    let ran = run_case(
        suite(),
        "a_finished_record_past_its_retention_vanishes_without_a_purge",
    );
    assert_eq!(counts(&ran), (1, 0, 0));
    let ran = run_case(suite(), "a_purge_never_removes_a_held_claim");
    assert_eq!(counts(&ran), (0, 0, 1));
    // Without saying so, the store fails the purge cases.
    let ran = run_case(
        flawed(Flaw::RetainsByExpiry),
        "a_purge_never_removes_a_held_claim",
    );
    assert_eq!(counts(&ran), (0, 1, 0));
}

fn a_case_needing_a_server_that_is_not_set_is_ignored_and_fails_in_ci() {
    let ran = run_case(
        flawed(Flaw::None).requiring_env("IDEMPOTENT_CONFORMANCE_NEVER_SET"),
        "a_repeat_after_completion_replays_the_first_result",
    );
    if std::env::var_os("CI").is_some() {
        assert_eq!(counts(&ran), (0, 1, 0), "in CI a missing server fails");
    } else {
        assert_eq!(counts(&ran), (0, 0, 1), "reported ignored, never passed");
    }
}

fn main() {
    quiet_expected_failures();
    harness::main(trials!(plain;
        a_store_that_lets_duplicates_through_fails_the_suite,
        a_store_that_forgets_completions_fails_the_suite,
        a_store_offering_only_the_protocol_passes_it_and_has_the_record_cases_ignored,
        the_same_cases_pass_on_a_store_without_the_flaw,
        a_step_the_store_does_not_offer_is_reported_ignored_not_passed,
        a_store_that_retains_by_expiry_is_checked_for_expiry_instead_of_purges,
        a_case_needing_a_server_that_is_not_set_is_ignored_and_fails_in_ci,
        the_restart_cases_are_ignored_without_a_server_to_restart,
        a_server_that_keeps_its_data_passes_the_restart_cases,
        a_server_that_forgets_its_data_on_a_restart_fails_the_restart_case,
    ));
}
