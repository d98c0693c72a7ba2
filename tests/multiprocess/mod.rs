//! Several OS processes on one store: the test binary runs itself again as
//! children, each with a role, and talks to them over pipes.
//!
//! - A child is this test binary started with `--exact <entry>` and the role
//!   in [`ROLE`]; the entry test does nothing in a normal run.
//! - A child reports by printing lines that start with `@@`, and waits for
//!   the parent's word on its stdin: that is the barrier that lets every
//!   child claim at the same moment.
//! - The provider stand-in is a file that every refund appends one line to,
//!   so it counts across processes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idempotent_tools::{Call, Error, Fingerprint, Key, Outcome, Run, Store, Takeover};
use tempfile::TempDir;

/// The environment variable naming a child's role.
pub const ROLE: &str = "IDEMPOTENT_TEST_ROLE";
/// The run id every child uses, so they all build the same key.
pub const RUN: &str = "IDEMPOTENT_TEST_RUN";
/// The provider stand-in's file.
pub const PROVIDER: &str = "IDEMPOTENT_TEST_PROVIDER";
/// The lease children claim with, in milliseconds.
pub const LEASE_MS: &str = "IDEMPOTENT_TEST_LEASE_MS";

/// How long the parent waits for a child's word. Reaching it is a failure.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A child process running one role.
pub struct Proc {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts this test binary again, running only the test `entry`, as
    /// `role`, with `env` set.
    pub fn spawn(entry: &str, role: &str, env: &[(&str, String)]) -> Proc {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args([entry, "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("spawn a child process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(said) = line.strip_prefix("@@")
                    && tx.send(said.to_owned()).is_err()
                {
                    break;
                }
            }
        });
        Proc {
            name: format!("{role}#{}", child.id()),
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child's next word, which must be `tag`, and returns
    /// what follows it.
    pub fn expect(&mut self, tag: &str) -> String {
        let line = self
            .lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("{} said nothing within {PATIENCE:?}", self.name));
        let (said, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        assert_eq!(said, tag, "{} said `{line}`", self.name);
        rest.to_owned()
    }

    /// Sends one line to the child's stdin.
    pub fn tell(&mut self, word: &str) {
        let stdin = self.stdin.as_mut().expect("the child's stdin");
        writeln!(stdin, "{word}").expect("write to the child");
        stdin.flush().expect("flush to the child");
    }

    /// `kill -9`: the process stops at once, wherever it is.
    pub fn kill_9(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// Pauses the process (SIGSTOP), as a long GC pause or a frozen VM would.
    pub fn pause(&self) {
        signal("-STOP", self.pid());
    }

    /// Resumes a paused process.
    pub fn resume(&self) {
        signal("-CONT", self.pid());
    }

    /// Waits for the process to exit successfully.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for the child");
        assert!(status.success(), "{} failed: {status}", self.name);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A failed test must not leave children behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn signal(which: &str, pid: u32) {
    let status = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid}");
}

/// Milliseconds since the epoch, comparable across processes on one host.
pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

/// This process's role, if it was started as a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Tells the parent something.
pub fn say(tag: &str, rest: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@{tag} {rest}").expect("stdout");
    out.flush().expect("stdout");
}

/// Waits for the parent's next line.
pub async fn hear() -> String {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
        line.trim().to_owned()
    })
    .await
    .expect("read stdin")
}

/// The provider stand-in: a file with one line per refund that reached it.
pub struct FileProvider(pub PathBuf);

impl FileProvider {
    /// From the path the parent set.
    pub fn from_env() -> FileProvider {
        FileProvider(PathBuf::from(
            std::env::var(PROVIDER).expect("provider path"),
        ))
    }

    /// Makes a refund: appends one line. `O_APPEND` writes of one short
    /// line are atomic, so concurrent processes never lose a count.
    pub fn refund(&self, order_id: &str) -> String {
        let id = format!("re_{}_{}", std::process::id(), now_ms());
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .expect("open the provider file");
        file.write_all(format!("{id} {order_id}\n").as_bytes())
            .expect("append a refund");
        id
    }

    /// How many refunds reached the provider.
    pub fn refunds(path: &Path) -> usize {
        std::fs::read_to_string(path)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }
}

/// The key every child refunds under.
pub fn the_key() -> Key {
    key_of(&std::env::var(RUN).expect("run id"))
}

/// The key the children of the run `run` refund under.
pub fn key_of(run: &str) -> Key {
    let run = Run::new(run).expect("run");
    Key::builder()
        .part("run", &run)
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("order_id", "1182"))
        .and_then(|b| b.finish())
        .expect("key")
}

fn lease() -> Option<Duration> {
    std::env::var(LEASE_MS)
        .ok()
        .map(|ms| Duration::from_millis(ms.parse().expect("lease in ms")))
}

fn refund_call(store: &Arc<dyn Store>) -> Call {
    let fingerprint = Fingerprint::builder()
        .arg("usd", &42u64)
        .expect("fingerprint")
        .finish();
    let call = Call::new("shop::refund_order", the_key())
        .fingerprint(fingerprint)
        .store(store);
    match lease() {
        Some(lease) => call.lease(lease),
        None => call,
    }
}

fn report(outcome: Result<Outcome<String>, Error>) {
    match outcome {
        Ok(Outcome::Fresh { value }) => say("outcome", format!("fresh {value}")),
        Ok(Outcome::Replay { value, .. }) => say("outcome", format!("replay {value}")),
        Ok(other) => say("outcome", format!("other {other:?}")),
        Err(Error::LeaseLost { .. }) => say("error", "lease-lost"),
        Err(Error::UnknownOutcome { .. }) => say("error", "unknown-outcome"),
        Err(Error::InProgress { .. }) => say("error", "in-progress"),
        Err(Error::Store(err)) => say("error", format!("store {err}")),
        Err(err) => say("error", format!("other {err}")),
    }
}

/// Plays a child's role against `store`.
///
/// - `race`: says `ready`, waits for `go`, then refunds.
/// - `hold`: refunds, says `acting`, and never finishes (to be killed).
/// - `stale`: refunds without the provider, says `acting`, and finishes with
///   `stale` only when told `finish` (to be paused past its lease first).
/// - `takeover` / `unknown`: refunds with the default / report-unknown
///   takeover policy, saying `acting <ms>` when the action starts.
pub async fn play(role: &str, store: Arc<dyn Store>) {
    let provider = FileProvider::from_env();
    match role {
        "race" => {
            say("ready", std::process::id());
            let go = hear().await;
            assert_eq!(go, "go");
            let outcome = refund_call(&store)
                .run(async { Ok::<_, Error>(provider.refund("1182")) })
                .await;
            report(outcome);
        }
        "hold" => {
            let outcome = refund_call(&store)
                .run(async {
                    say("acting", now_ms());
                    std::future::pending::<Result<String, Error>>().await
                })
                .await;
            report(outcome);
        }
        "stale" => {
            let outcome = refund_call(&store)
                .run(async {
                    say("acting", now_ms());
                    let word = hear().await;
                    assert_eq!(word, "finish");
                    Ok::<_, Error>("stale".to_owned())
                })
                .await;
            report(outcome);
        }
        "takeover" | "unknown" => {
            let takeover = if role == "unknown" {
                Takeover::ReportUnknown
            } else {
                Takeover::Rerun
            };
            let outcome = refund_call(&store)
                .takeover(takeover)
                .run(async {
                    say("acting", now_ms());
                    Ok::<_, Error>(provider.refund("1182"))
                })
                .await;
            report(outcome);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Parses a child's `outcome` report into (fresh?, value).
pub fn parse_outcome(said: &str) -> (bool, String) {
    let (kind, value) = said.split_once(' ').expect("kind and value");
    match kind {
        "fresh" => (true, value.to_owned()),
        "replay" => (false, value.to_owned()),
        other => panic!("unexpected outcome `{other} {value}`"),
    }
}

/// What a child reported by the end: whether (and when) its action ran,
/// and its outcome or error.
pub struct Report {
    /// When the action started, in [`now_ms`], if it ran.
    pub acted_at: Option<u128>,
    /// `(fresh?, value)`, or the error's kind.
    pub result: Result<(bool, String), String>,
}

impl Report {
    /// Whether the child got a fresh result.
    pub fn fresh(&self) -> bool {
        matches!(self.result, Ok((true, _)))
    }
}

/// Reads a child's words up to its final `outcome` or `error`.
pub fn report_of(proc: &mut Proc) -> Report {
    let mut acted_at = None;
    loop {
        let line = proc
            .lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("{} said nothing within {PATIENCE:?}", proc.name));
        match line.split_once(' ') {
            Some(("acting", at)) => acted_at = Some(at.parse().expect("a time")),
            Some(("outcome", rest)) => {
                return Report {
                    acted_at,
                    result: Ok(parse_outcome(rest)),
                };
            }
            Some(("error", rest)) => {
                return Report {
                    acted_at,
                    result: Err(rest.to_owned()),
                };
            }
            _ => panic!("{} said `{line}`", proc.name),
        }
    }
}

/// A child's final outcome or error, whether or not its action ran.
pub fn final_word(proc: &mut Proc) -> Result<(bool, String), String> {
    report_of(proc).result
}

/// The test every child process runs: a store's test file defines a test of
/// this name that opens its store and calls [`play`] when [`role`] is set.
pub const ENTRY: &str = "child_process";

/// Children on one store, one run and one provider file.
pub struct Scene {
    dir: TempDir,
    /// The run id every child builds its key from.
    pub run: String,
    store: Vec<(&'static str, String)>,
}

impl Scene {
    /// A scene whose provider file lives in `dir`, and whose children find
    /// their store through the environment variables `store`.
    pub fn new(dir: TempDir, store: Vec<(&'static str, String)>) -> Scene {
        Scene {
            dir,
            run: crate::adversarial::fresh_run().to_string(),
            store,
        }
    }

    /// The scene's directory, removed with it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The provider stand-in's file.
    pub fn provider(&self) -> PathBuf {
        self.dir.path().join("provider.log")
    }

    /// Starts a child playing `role`, claiming with `lease` if given.
    pub fn spawn(&self, role: &str, lease: Option<Duration>) -> Proc {
        let mut env = self.store.clone();
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
