//! Each case as a trial: decided at run time (ignored, with the reason,
//! when the store cannot take part), run on a multi-thread runtime, and
//! cleaned up after, pass or fail.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use libtest_mimic::{Completion, Failed, Trial};

use super::case::{Connect, Need, Statements, Subject};
use super::kit::NotOffered;
use super::processes::{self, Scene};
use super::{Body, Case};
use super::{Count, PURGE_BATCH, Scope, Suite};
use idempotent_tools::store::Store;

/// Every case of the suite, and the children's entry point unless the store
/// lives within one process.
pub(super) fn trials<S: Store>(suite: Arc<Suite<S>>) -> Vec<Trial> {
    let mut cases = super::claims::cases();
    cases.extend(super::releases::cases());
    cases.extend(super::cancellation::cases());
    cases.extend(super::leases::cases());
    cases.extend(super::unknown::cases());
    cases.extend(super::durable::cases());
    cases.extend(super::inspection::cases());
    cases.extend(super::resolution::cases());
    cases.extend(super::restarts::cases());
    cases.extend(processes::cases());
    let mut trials: Vec<Trial> = cases
        .into_iter()
        .map(|case| {
            let suite = suite.clone();
            Trial::ignorable_test(case.name, move || suite.decide(&case))
        })
        .collect();
    if !suite.one_process {
        trials.push(Trial::ignorable_test(processes::ENTRY, move || {
            suite.play_child()
        }));
    }
    trials
}

fn runtime() -> Result<tokio::runtime::Runtime, Failed> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("a runtime: {e}")))
}

/// A panic's message.
fn message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("the case panicked")
}

/// A failed case, or an ignored one if it stopped at a step the store does
/// not offer.
fn verdict(panic: &(dyn Any + Send)) -> Result<Completion, Failed> {
    match panic.downcast_ref::<NotOffered>() {
        Some(NotOffered(reason)) => Ok(Completion::ignored_with(reason)),
        None => Err(Failed::from(message(panic))),
    }
}

/// How many statements `store` has sent so far, if the store counts them.
fn counter<S: Store>(count: Option<&Arc<Count<S>>>, store: &Arc<S>) -> Option<Statements> {
    count.cloned().map(|count| {
        let store = store.clone();
        Arc::new(move || count(&store)) as Statements
    })
}

impl<S: Store> Suite<S> {
    /// Why the store cannot take part in a case that needs `need`.
    fn lacks(&self, need: Need) -> Option<&'static str> {
        match need {
            Need::Processes if self.one_process => {
                Some("the store lives within one process: no OS-process cases")
            }
            Need::Leases if self.one_process => Some(
                "the store lives within one process, where a holder never stops without \
                 releasing: no lease runs out",
            ),
            Need::Statements if self.count.is_none() => {
                Some("the store does not count its statements (Suite::counting_statements)")
            }
            Need::BatchPurge if !self.batches => {
                Some("the store does not purge in batches (Suite::purging_in_batches)")
            }
            Need::PurgeJob if self.expiry => Some(
                "the store retains by key expiry and has no purge job: \
                 a_finished_record_past_its_retention_vanishes_without_a_purge checks it instead",
            ),
            Need::Restarts if self.restartable.is_none() => {
                Some("the store's test supplies no server to restart (Suite::restarting)")
            }
            Need::Expiry if !self.expiry => Some(
                "the store keeps expired records until a purge \
                 (a_purge_deletes_expired_records... and the other purge cases check it)",
            ),
            _ => None,
        }
    }

    /// Runs `case`, or says why it is ignored.
    fn decide(&self, case: &Case) -> Result<Completion, Failed> {
        if let Some(var) = self.env
            && std::env::var_os(var).is_none()
        {
            if std::env::var_os("CI").is_some() {
                return Err(format!("{var} must be set in CI: this case needs its server").into());
            }
            return Ok(Completion::ignored_with(format!("needs {var}")));
        }
        if let Some(reason) = case.needs.iter().find_map(|&need| self.lacks(need)) {
            return Ok(Completion::ignored_with(reason));
        }
        let dir = tempfile::Builder::new()
            .prefix("idempotent-conformance-")
            .tempdir()
            .map_err(|e| Failed::from(format!("a temporary directory: {e}")))?;
        let batch = case
            .needs
            .contains(&Need::BatchPurge)
            .then_some(PURGE_BATCH);
        let scope = Scope::new(case.name, dir.path(), batch);
        let runtime = runtime()?;
        let played = catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(self.play(case, scope.clone()))
        }));
        let cleaned = match &self.clean_up {
            Some(clean_up) => catch_unwind(AssertUnwindSafe(|| runtime.block_on(clean_up(scope)))),
            None => Ok(()),
        };
        drop(runtime);
        drop(dir);
        match (played, cleaned) {
            (Err(panic), _) => verdict(&*panic),
            (Ok(()), Err(panic)) => Err(Failed::from(format!(
                "the clean-up after the case failed: {}",
                message(&*panic)
            ))),
            (Ok(()), Ok(())) => Ok(Completion::Completed),
        }
    }

    async fn open(&self, scope: Scope) -> Arc<S> {
        Arc::new((self.make)(scope).await)
    }

    /// Opens further connections to the store of the case in `scope`,
    /// unless the store lives within one process.
    fn connector(&self, scope: &Scope) -> Option<Connect> {
        if self.one_process {
            return None;
        }
        let (make, count, scope) = (self.make.clone(), self.count.clone(), scope.clone());
        Some(Arc::new(move || {
            let (make, count, scope) = (make.clone(), count.clone(), scope.another_connection());
            Box::pin(async move {
                let store = Arc::new(make(scope).await);
                let statements = counter(count.as_ref(), &store);
                (store as Arc<dyn Store>, statements)
            })
        }))
    }

    async fn play(&self, case: &Case, scope: Scope) {
        match case.body {
            Body::InProcess(body) => {
                let connect = self.connector(&scope);
                let store = self.open(scope).await;
                body(Subject {
                    statements: counter(self.count.as_ref(), &store),
                    records: self.records.map(|records| records(store.clone())),
                    store,
                    callers: self.callers,
                    connect,
                })
                .await;
            }
            Body::Restarting(body) => {
                let open = self
                    .restartable
                    .clone()
                    .expect("a restart case runs only with a server to restart");
                let (store, server) = open(scope).await;
                let store = Arc::new(store);
                let records = self.records.map(|records| records(store.clone()));
                body(super::restarts::Restartable::new(store, records, server)).await;
            }
            Body::Processes(scenario) => {
                // The parent opens the store first (creating its file or
                // schema), as an operator's first start would.
                let store = self.open(scope.clone()).await;
                let records = self.records.map(|records| records(store.clone()));
                let scene = Scene::within(scope, records);
                tokio::task::spawn_blocking(move || scenario(&scene))
                    .await
                    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            }
        }
    }

    /// The children's entry point: plays the role it was started with
    /// against the parent's store, or, in a normal run, does nothing.
    fn play_child(&self) -> Result<Completion, Failed> {
        let (Some(role), Some(scope)) = (processes::role(), Scope::from_env()) else {
            return Ok(Completion::ignored_with(
                "the entry point of the OS-process cases' children: it plays a role only there",
            ));
        };
        let runtime = runtime()?;
        runtime.block_on(async {
            let store: Arc<dyn Store> = self.open(scope).await;
            processes::play(&role, store).await;
        });
        Ok(Completion::Completed)
    }
}
