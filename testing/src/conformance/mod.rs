//! The conformance suite: every promise the project's stores keep, as one
//! set of test cases that runs against any [`Store`], yours included.
//!
//! A store is only as good as the claims it refuses. The suite races
//! identical calls (in tasks and in OS processes) and claims from several
//! connections, drops calls at every
//! `.await`, fails completions, kills a holder with `kill -9` and pauses
//! another past its lease, purges while keys are claimed again, and reads
//! records back as an operator would. Each case counts what reached a
//! stand-in provider: a case passes when every ask acted once.
//!
//! One call runs it all: [`Suite::new`] takes a factory that makes a fresh
//! store for each case, from the case's [`Scope`] (its name, a unique id, a
//! temporary directory), and [`Suite::run`] runs every case as `cargo test`
//! runs tests, with the same arguments, filters and summary. Put it in a test
//! target of its own with `harness = false`:
//!
//! ```toml
//! [[test]]
//! name = "conformance"
//! harness = false
//! ```
//!
//! ```no_run
//! use idempotent_tools_testing::conformance::{Scope, Suite};
//! use idempotent_tools::{
//!     MemoryStore,
//!     store::{Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreFuture, StoreResult},
//! };
//! use std::time::Duration;
//!
//! /// A third party's store; here it hands every step to a memory store.
//! struct MyStore(MemoryStore);
//!
//! impl Store for MyStore {
//!     fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
//!         self.0.claim(req)
//!     }
//!     fn complete<'a>(&'a self, claim: &'a Claim, done: Completion) -> StoreFuture<'a, StoreResult<()>> {
//!         self.0.complete(claim, done)
//!     }
//!     fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
//!         self.0.release(claim)
//!     }
//!     fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
//!         self.0.renew(claim, lease)
//!     }
//! }
//!
//! fn main() {
//!     // A fresh store per case. A store on a file would open
//!     // `scope.dir().join("claims.db")`; one on a server would use a
//!     // schema or prefix named after `scope.id()`.
//!     Suite::new(|_scope: Scope| async { MyStore(MemoryStore::new()) })
//!         // Its holders live in this process: no OS-process cases, and
//!         // leases that never run out.
//!         .within_one_process()
//!         .run()
//! }
//! ```
//!
//! A case the store cannot take part in is reported *ignored*, with the
//! reason, never passed: an OS-process case for a store
//! [within one process](Suite::within_one_process), a statement count for a
//! store that does not [count them](Suite::counting_statements), the record
//! cases for a store that does not offer [`Records`]
//! ([`Suite::with_records`]) or answers a step with
//! [`StoreError::Unsupported`](idempotent_tools::store::StoreError::Unsupported), every case
//! when the server's address [is not set](Suite::requiring_env), the
//! restart cases for a store whose test supplies no server to
//! [restart](Suite::restarting).
//!
//! To run a store's own cases beside the suite, take the suite's
//! [trials](Suite::trials) and add yours:
//! `libtest_mimic::run(&Arguments::from_args(), trials).exit()`.
//!
//! The OS-process cases start the test binary again as children, each with
//! a role to play: [`Suite::trials`] includes the children's entry point
//! (a case named [`processes::ENTRY`]), which plays the role against a store
//! the factory opens on the parent's scope (`scope.is_child()` is then
//! true: open the parent's store, do not create a new one). The case that
//! races claims from several connections opens each connection past the
//! first the same way, in the same process.
//!
//! [`kit`] holds the stand-in provider and the refund call the cases are
//! made of, for a store's own cases to read like the suite's.

mod cancellation;
mod case;
mod claims;
mod durable;
mod faulty;
mod inspection;
pub mod kit;
mod leases;
pub mod processes;
mod releases;
mod resolution;
mod restarts;
mod scope;
mod trial;
mod unknown;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use libtest_mimic;
use libtest_mimic::{Arguments, Trial};
pub use restarts::Restart;
pub use scope::Scope;

use idempotent_tools::records::Records;
use idempotent_tools::store::Store;

pub(crate) type Future_ = Pin<Box<dyn Future<Output = ()>>>;

/// A case's body.
pub(crate) enum Body {
    /// Runs in this process against one store.
    InProcess(fn(case::Subject) -> Future_),
    /// Plays a scenario with child processes (blocking while they run),
    /// beside a store of the parent's own that is opened first.
    Processes(fn(&processes::Scene)),
    /// Runs in this process against a store on a server of the case's own,
    /// which it restarts.
    Restarting(fn(restarts::Restartable) -> Future_),
}

/// One case of the suite.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) needs: &'static [case::Need],
    pub(crate) body: Body,
}

/// The rows a purge deletes per statement in the batch-purging case, for a
/// store [purging in batches](Suite::purging_in_batches): its factory reads
/// it from [`Scope::purge_batch`].
pub const PURGE_BATCH: usize = 10;

type Make<S> = dyn Fn(Scope) -> Pin<Box<dyn Future<Output = S>>> + Send + Sync;
type CleanUp = dyn Fn(Scope) -> Pin<Box<dyn Future<Output = ()>>> + Send + Sync;
type Count<S> = dyn Fn(&S) -> u64 + Send + Sync;
type AsRecords<S> = fn(Arc<S>) -> Arc<dyn Records>;
type OpenRestartable<S> =
    dyn Fn(Scope) -> Pin<Box<dyn Future<Output = (S, Box<dyn restarts::Restarts>)>>> + Send + Sync;

/// The conformance suite for one kind of store: what the store can and
/// cannot do, and how to make a fresh one for each case.
///
/// See the [module](self) for an example.
pub struct Suite<S> {
    make: Arc<Make<S>>,
    clean_up: Option<Arc<CleanUp>>,
    count: Option<Arc<Count<S>>>,
    records: Option<AsRecords<S>>,
    one_process: bool,
    batches: bool,
    expiry: bool,
    callers: usize,
    env: Option<&'static str>,
    restartable: Option<Arc<OpenRestartable<S>>>,
}

impl<S: Store> Suite<S> {
    /// The suite, making each case's store with `make`, from the case's
    /// [`Scope`]. Cases never share a store, and keys carry a fresh run per
    /// case, so stores on one server never see each other's records.
    pub fn new<F, Fut>(make: F) -> Suite<S>
    where
        F: Fn(Scope) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = S> + 'static,
    {
        Suite {
            make: Arc::new(move |scope| Box::pin(make(scope))),
            clean_up: None,
            count: None,
            records: None,
            one_process: false,
            batches: false,
            expiry: false,
            callers: 1000,
            env: None,
            restartable: None,
        }
    }

    /// The store lives within one process (as a memory store does): the
    /// cases with OS processes are left out, and so are those that wait a
    /// lease out, since a holder in the same process never stops without
    /// releasing. Claims racing from several connections share the one
    /// store.
    pub fn within_one_process(mut self) -> Suite<S> {
        self.one_process = true;
        self
    }

    /// How many statements (round trips) the store has sent so far, read
    /// by `count`: the cases that prove each step takes one statement run
    /// only with it.
    pub fn counting_statements(
        mut self,
        count: impl Fn(&S) -> u64 + Send + Sync + 'static,
    ) -> Suite<S> {
        self.count = Some(Arc::new(count));
        self
    }

    /// The store deletes expired records at most [`Scope::purge_batch`]
    /// rows per statement, so that a purge never locks a table for long:
    /// the batch-purging case runs, with [`PURGE_BATCH`].
    pub fn purging_in_batches(mut self) -> Suite<S> {
        self.batches = true;
        self
    }

    /// The store forgets a record when its retention runs out by itself
    /// (key expiry, as on Redis), so it needs no purge job and
    /// [`Records::purge_expired`] returns 0. The cases that purge are left out,
    /// and one that waits for a completed record to vanish runs instead.
    pub fn retaining_by_expiry(mut self) -> Suite<S> {
        self.expiry = true;
        self
    }

    /// How many callers race for one key in the case that proves they act
    /// once (1,000 unless set): fewer for a store whose every claim is a
    /// round trip to a server.
    pub fn racing_callers(mut self, callers: usize) -> Suite<S> {
        self.callers = callers.max(1);
        self
    }

    /// Every case needs the environment variable `var` (a server's
    /// address): without it each is reported ignored ("needs `var`"), and
    /// fails when `CI` is set, where a missing server is a broken set-up.
    pub fn requiring_env(mut self, var: &'static str) -> Suite<S> {
        self.env = Some(var);
        self
    }

    /// The restart cases run: `open` starts a server of the case's own for
    /// `scope`, opens a store on it, and returns both, the server as a
    /// [`Restart`] the cases stop and start again under the store while
    /// calls go on. Without it the restart cases are reported ignored.
    ///
    /// The server must keep what it acknowledged across a restart (a Redis
    /// server with an append-only file, say). It is the case's own, so
    /// stopping it disturbs no other case; it is dropped at the end of the
    /// case, after the store, and should stop there.
    ///
    /// ```no_run
    /// use std::process::{Child, Command};
    /// use idempotent_tools_testing::conformance::{Restart, Scope, Suite};
    /// # use std::time::Duration;
    /// # use idempotent_tools::{MemoryStore, store::{Claim, ClaimAnswer, ClaimRequest,
    /// #     Completion, Store, StoreFuture, StoreResult}};
    /// # /// A third party's store on a server.
    /// # struct MyStore(MemoryStore);
    /// # impl MyStore {
    /// #     async fn connect(_url: &str) -> MyStore { MyStore(MemoryStore::new()) }
    /// # }
    /// # impl Store for MyStore {
    /// #     fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> { self.0.claim(req) }
    /// #     fn complete<'a>(&'a self, claim: &'a Claim, done: Completion) -> StoreFuture<'a, StoreResult<()>> { self.0.complete(claim, done) }
    /// #     fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> { self.0.release(claim) }
    /// #     fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> { self.0.renew(claim, lease) }
    /// # }
    ///
    /// /// A server of the case's own (here a `redis-server`), keeping its
    /// /// data in the case's directory.
    /// struct Server {
    ///     dir: std::path::PathBuf,
    ///     child: Option<Child>,
    /// }
    ///
    /// impl Server {
    ///     fn spawn(&mut self) {
    ///         let child = Command::new("redis-server")
    ///             .args(["--port", "6390", "--appendonly", "yes", "--appendfsync", "always"])
    ///             .arg("--dir")
    ///             .arg(&self.dir)
    ///             .spawn()
    ///             .expect("redis-server");
    ///         self.child = Some(child);
    ///         // ... and wait until it accepts connections.
    ///     }
    /// }
    ///
    /// impl Restart for Server {
    ///     async fn stop(&mut self) {
    ///         if let Some(mut child) = self.child.take() {
    ///             child.kill().expect("kill");
    ///             child.wait().expect("reap");
    ///         }
    ///     }
    ///     async fn start(&mut self) {
    ///         self.spawn();
    ///     }
    /// }
    ///
    /// impl Drop for Server {
    ///     fn drop(&mut self) {
    ///         if let Some(mut child) = self.child.take() {
    ///             let _ = child.kill();
    ///             let _ = child.wait();
    ///         }
    ///     }
    /// }
    ///
    /// fn main() {
    ///     // Every other case runs on the shared server.
    ///     Suite::new(|_: Scope| MyStore::connect("redis://127.0.0.1:6379"))
    ///         .restarting(|scope: Scope| async move {
    ///             let mut server = Server { dir: scope.dir().to_owned(), child: None };
    ///             server.spawn();
    ///             (MyStore::connect("redis://127.0.0.1:6390").await, server)
    ///         })
    ///         .run()
    /// }
    /// ```
    pub fn restarting<F, Fut, R>(mut self, open: F) -> Suite<S>
    where
        F: Fn(Scope) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = (S, R)> + 'static,
        R: Restart,
    {
        let open = Arc::new(open);
        self.restartable = Some(Arc::new(move |scope| {
            let open = open.clone();
            Box::pin(async move {
                let (store, server) = open(scope).await;
                (store, Box::new(server) as Box<dyn restarts::Restarts>)
            })
        }));
        self
    }

    /// Runs `clean_up` after each case, pass or fail, once its store is
    /// dropped: to drop the schema or the keys the factory made for
    /// `scope`. Not run in the OS-process cases' children.
    pub fn cleaning_up<F, Fut>(mut self, clean_up: F) -> Suite<S>
    where
        F: Fn(Scope) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.clean_up = Some(Arc::new(move |scope| Box::pin(clean_up(scope))));
        self
    }

    /// Every case as a trial, named for the behaviour it proves, to run
    /// with [`libtest_mimic::run`] beside the store's own cases.
    pub fn trials(self) -> Vec<Trial> {
        trial::trials(Arc::new(self))
    }

    /// Runs every case as `cargo test` runs tests, and exits: the body of a
    /// `harness = false` test target's `main`.
    pub fn run(self) -> ! {
        libtest_mimic::run(&Arguments::from_args(), self.trials()).exit()
    }
}

impl<S: Records> Suite<S> {
    /// The store also offers the operator's calls ([`Records`]): the cases
    /// that list, inspect, count, forget and purge records run. Without it
    /// they are reported ignored, and a store that implements only
    /// [`Store`] passes every protocol case.
    pub fn with_records(mut self) -> Suite<S> {
        self.records = Some(|store| store);
        self
    }
}
