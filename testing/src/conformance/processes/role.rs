//! A child process's side: the role it plays against its store, and how it
//! talks to its parent.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idempotent_tools::{
    Error, Outcome, Run,
    call::{Call, Fingerprint, Key, Takeover},
    store::Store,
};

/// The environment variable naming a child's role.
pub(crate) const ROLE: &str = "IDEMPOTENT_TEST_ROLE";
/// The run id every child uses, so they all build the same key.
pub(crate) const RUN: &str = "IDEMPOTENT_TEST_RUN";
/// The provider stand-in's file.
pub(crate) const PROVIDER: &str = "IDEMPOTENT_TEST_PROVIDER";
/// The lease children claim with, in milliseconds.
pub(crate) const LEASE_MS: &str = "IDEMPOTENT_TEST_LEASE_MS";

/// Milliseconds since the epoch, comparable across processes on one host.
pub(crate) fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

/// This process's role, if it was started as a child.
pub(crate) fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Tells the parent something.
pub(crate) fn say(tag: &str, rest: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@{tag} {rest}").expect("stdout");
    out.flush().expect("stdout");
}

/// Waits for the parent's next line.
pub(crate) async fn hear() -> String {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
        line.trim().to_owned()
    })
    .await
    .expect("read stdin")
}

/// The provider stand-in: a file with one line per refund that reached it.
pub(crate) struct FileProvider(pub PathBuf);

impl FileProvider {
    /// From the path the parent set.
    pub(crate) fn from_env() -> FileProvider {
        FileProvider(PathBuf::from(
            std::env::var(PROVIDER).expect("provider path"),
        ))
    }

    /// Makes a refund: appends one line. `O_APPEND` writes of one short
    /// line are atomic, so concurrent processes never lose a count.
    pub(crate) fn refund(&self, order_id: &str) -> String {
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
    pub(crate) fn refunds(path: &Path) -> usize {
        std::fs::read_to_string(path)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }
}

/// The key every child refunds under.
pub(crate) fn the_key() -> Key {
    key_of(&std::env::var(RUN).expect("run id"))
}

/// The key the children of the run `run` refund under.
pub(crate) fn key_of(run: &str) -> Key {
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
pub(crate) async fn play(role: &str, store: Arc<dyn Store>) {
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
