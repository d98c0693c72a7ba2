//! Several OS processes on one store: the test binary runs itself again as
//! children, each with a role, and talks to them over pipes.
//!
//! - A child is this test binary started with `--exact` [`ENTRY`], the role
//!   in an environment variable, and the parent's [`Scope`] in its environment; the suite's
//!   trial of that name plays the role against a store the factory opens in
//!   that scope.
//! - A child reports by printing lines that start with `@@`, and waits for
//!   the parent's word on its stdin: that is the barrier that lets every
//!   child claim at the same moment.
//! - The provider stand-in is a file that every refund appends one line to,
//!   so it counts across processes.

mod child;
mod role;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tokio::runtime::Handle;

use super::Scope;
use super::case::Need;
use super::kit::fresh_run;
use super::{Body, Case};
use child::Proc;
use child::{final_word, report_of};
use role::{FileProvider, LEASE_MS, PROVIDER, RUN, key_of, now_ms};
pub(crate) use role::{play, role};

use idempotent_tools::records::Records;
use idempotent_tools::{call::Key, records::Record};

pub(super) fn cases() -> Vec<Case> {
    let scenario = |name, play| Case {
        name,
        needs: &[Need::Processes, Need::Leases],
        body: Body::Processes(play),
    };
    vec![
        scenario(
            "six_processes_refunding_the_same_order_at_once_refund_it_once",
            six_processes_refunding_the_same_order_at_once_refund_it_once,
        ),
        scenario(
            "a_holder_killed_mid_action_is_taken_over_once_after_its_lease",
            a_holder_killed_mid_action_is_taken_over_once_after_its_lease,
        ),
        scenario(
            "after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so",
            after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so,
        ),
        scenario(
            "a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result",
            a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result,
        ),
    ]
}

/// The trial every child process runs: the suite's [trials](super::Suite::trials)
/// include it, and it plays a role only in a child.
pub const ENTRY: &str = "child_process";

/// Children on one store, one run and one provider file: the place of an
/// OS-process case.
///
/// The suite makes one per case; a store's own multi-process cases make
/// one with [`Scene::new`], and its children open their store from the
/// scene's [`Scope`], through the suite's factory.
pub struct Scene {
    scope: Scope,
    /// Owns the scene's directory, when the scene made it.
    _dir: Option<TempDir>,
    /// The parent's own store on the scene, with the runtime it runs on,
    /// when the suite plays the scene and the store offers [`Records`]: a
    /// scenario reads records through it.
    parent: Option<(Arc<dyn Records>, Handle)>,
    /// The run id every child builds its key from.
    run: String,
}

impl Scene {
    /// A scene in a new temporary directory, removed with it. No store is
    /// made: the first child to open one creates it.
    pub fn new() -> Scene {
        let dir = tempfile::Builder::new()
            .prefix("idempotent-scene-")
            .tempdir()
            .expect("a temporary directory");
        let scope = Scope::new("scene", dir.path(), None);
        Scene {
            scope,
            _dir: Some(dir),
            parent: None,
            run: fresh_run().to_string(),
        }
    }

    /// A scene in a case's scope, whose directory the case owns, beside
    /// the parent's own store, if it offers [`Records`].
    pub(crate) fn within(scope: Scope, records: Option<Arc<dyn Records>>) -> Scene {
        Scene {
            scope,
            _dir: None,
            parent: records.map(|records| (records, Handle::current())),
            run: fresh_run().to_string(),
        }
    }

    /// The scope the children's stores are opened in.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The scene's directory.
    pub fn dir(&self) -> &Path {
        self.scope.dir()
    }

    /// The provider stand-in's file.
    pub(crate) fn provider(&self) -> PathBuf {
        self.dir().join("provider.log")
    }

    /// Starts a child playing `role`, claiming with `lease` if given.
    pub(crate) fn spawn(&self, role: &str, lease: Option<Duration>) -> Proc {
        let mut env = self.scope.env();
        env.push((RUN, self.run.clone()));
        env.push((PROVIDER, self.provider().display().to_string()));
        if let Some(lease) = lease {
            env.push((LEASE_MS, lease.as_millis().to_string()));
        }
        Proc::spawn(ENTRY, role, &env)
    }

    /// How many refunds reached the provider.
    pub fn refunds(&self) -> usize {
        FileProvider::refunds(&self.provider())
    }

    /// The key every child of this scene refunds under.
    pub fn key(&self) -> Key {
        key_of(&self.run)
    }
}

impl Scene {
    /// The key's record as the parent's store reads it, if the suite plays
    /// the scene and the store offers [`Records::inspect`]. Called from the
    /// scenario's blocking thread.
    fn record(&self) -> Option<Record> {
        let (store, runtime) = self.parent.as_ref()?;
        let read = runtime.block_on(store.inspect(&self.key()));
        Some(read.expect("inspect").expect("the claim's record"))
    }
}

impl Default for Scene {
    fn default() -> Scene {
        Scene::new()
    }
}

// The scenarios every durable store plays; each blocks while its children run.

/// Six children wait at a barrier, then refund the same order at once.
pub fn six_processes_refunding_the_same_order_at_once_refund_it_once(scene: &Scene) {
    let mut procs: Vec<Proc> = (0..6).map(|_| scene.spawn("race", None)).collect();
    for proc in &mut procs {
        proc.expect("ready");
    }
    for proc in &mut procs {
        proc.tell("go");
    }
    let mut fresh = Vec::new();
    let mut values = Vec::new();
    for proc in &mut procs {
        let (is_fresh, value) = final_word(proc).expect("an outcome");
        if is_fresh {
            fresh.push(proc.name.clone());
        }
        values.push(value);
    }
    for proc in procs {
        proc.finish();
    }
    assert_eq!(fresh.len(), 1, "exactly one process acts: {fresh:?}");
    assert_eq!(
        scene.refunds(),
        1,
        "exactly one refund reached the provider"
    );
    assert!(
        values.iter().all(|v| *v == values[0]),
        "every process got the one refund: {values:?}"
    );
}

/// A holder is killed while it acts; three children race to take over.
pub fn a_holder_killed_mid_action_is_taken_over_once_after_its_lease(scene: &Scene) {
    let lease = Duration::from_millis(1000);
    let mut holder = scene.spawn("hold", Some(lease));
    holder.expect("acting");
    holder.kill_9();
    let killed_at = now_ms();

    let mut procs: Vec<Proc> = (0..3)
        .map(|_| scene.spawn("takeover", Some(lease)))
        .collect();
    let mut acted_at = Vec::new();
    let mut fresh = 0;
    for proc in &mut procs {
        let report = report_of(proc);
        acted_at.extend(report.acted_at);
        fresh += usize::from(report.fresh());
    }
    for proc in procs {
        proc.finish();
    }
    assert_eq!(fresh, 1, "exactly one process takes the claim over");
    assert_eq!(acted_at.len(), 1);
    assert_eq!(
        scene.refunds(),
        1,
        "the killed holder never reached the provider"
    );
    // The holder renewed every third of its lease, so its lease ran at least
    // two thirds of a lease past the kill.
    let earliest = killed_at + lease.as_millis() * 2 / 3;
    assert!(
        acted_at[0] + 50 >= earliest,
        "taken over {} ms after the kill, before the lease ran out",
        acted_at[0].saturating_sub(killed_at)
    );
    if let Some(record) = scene.record() {
        assert_eq!(
            (record.fence, record.taken_over),
            (2, true),
            "one takeover, one fence bump"
        );
    }
}

/// A holder is killed while it acts; later callers that report an unknown
/// outcome, and any caller after them, run nothing.
pub fn after_a_crash_the_report_unknown_policy_runs_nothing_and_says_so(scene: &Scene) {
    let lease = Duration::from_millis(300);
    let mut holder = scene.spawn("hold", Some(lease));
    holder.expect("acting");
    holder.kill_9();
    let mut unknown = scene.spawn("unknown", Some(lease));
    assert_eq!(
        final_word(&mut unknown),
        Err("unknown-outcome".to_owned()),
        "the takeover must not run the action"
    );
    unknown.finish();
    let mut later = scene.spawn("takeover", Some(lease));
    assert_eq!(final_word(&mut later), Err("unknown-outcome".to_owned()));
    later.finish();
    assert_eq!(scene.refunds(), 0);
}

/// A holder is paused (SIGSTOP) past its lease while another takes over and
/// completes; resumed, it finishes and is refused.
pub fn a_stale_holder_paused_past_its_lease_cannot_overwrite_the_result(scene: &Scene) {
    let lease = Duration::from_millis(500);
    let mut stale = scene.spawn("stale", Some(lease));
    stale.expect("acting");
    stale.pause();

    let mut current = scene.spawn("takeover", Some(lease));
    current.expect("acting");
    let (fresh, value) = final_word(&mut current).expect("the takeover's outcome");
    assert!(fresh);
    current.finish();

    stale.resume();
    stale.tell("finish");
    assert_eq!(final_word(&mut stale), Err("lease-lost".to_owned()));
    stale.finish();

    let mut after = scene.spawn("takeover", Some(lease));
    assert_eq!(
        final_word(&mut after),
        Ok((false, value)),
        "the takeover's result stands"
    );
    after.finish();
    assert_eq!(scene.refunds(), 1);
}
