//! A child process as its parent sees it: started, told, read, killed,
//! paused and resumed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use super::role::ROLE;

/// How long the parent waits for a child's word. Reaching it is a failure.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// A child process running one role.
pub(crate) struct Proc {
    pub(crate) name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts this test binary again, running only the test `entry`, as
    /// `role`, with `env` set.
    pub(crate) fn spawn(entry: &str, role: &str, env: &[(&str, String)]) -> Proc {
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
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child's next word, which must be `tag`, and returns
    /// what follows it.
    pub(crate) fn expect(&mut self, tag: &str) -> String {
        let line = match self.lines.recv_timeout(PATIENCE) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} said nothing within {PATIENCE:?}", self.name)
            }
            Err(RecvTimeoutError::Disconnected) => panic!(
                "{} ended its output before saying `{tag}`: see its own panic above",
                self.name
            ),
        };
        let (said, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        assert_eq!(said, tag, "{} said `{line}`", self.name);
        rest.to_owned()
    }

    /// Sends one line to the child's stdin.
    pub(crate) fn tell(&mut self, word: &str) {
        let stdin = self.stdin.as_mut().expect("the child's stdin");
        writeln!(stdin, "{word}").expect("write to the child");
        stdin.flush().expect("flush to the child");
    }

    /// `kill -9`: the process stops at once, wherever it is.
    pub(crate) fn kill_9(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// Pauses the process (SIGSTOP), as a long GC pause or a frozen VM would.
    pub(crate) fn pause(&self) {
        signal("-STOP", self.pid());
    }

    /// Resumes a paused process.
    pub(crate) fn resume(&self) {
        signal("-CONT", self.pid());
    }

    /// Waits for the process to exit successfully.
    pub(crate) fn finish(mut self) {
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

/// Parses a child's `outcome` report into (fresh?, value).
pub(crate) fn parse_outcome(said: &str) -> (bool, String) {
    let (kind, value) = said.split_once(' ').expect("kind and value");
    match kind {
        "fresh" => (true, value.to_owned()),
        "replay" => (false, value.to_owned()),
        other => panic!("unexpected outcome `{other} {value}`"),
    }
}

/// What a child reported by the end: whether (and when) its action ran,
/// and its outcome or error.
pub(crate) struct Report {
    /// When the action started, in [`now_ms`], if it ran.
    pub(crate) acted_at: Option<u128>,
    /// `(fresh?, value)`, or the error's kind.
    pub(crate) result: Result<(bool, String), String>,
}

impl Report {
    /// Whether the child got a fresh result.
    pub(crate) fn fresh(&self) -> bool {
        matches!(self.result, Ok((true, _)))
    }
}

/// Reads a child's words up to its final `outcome` or `error`.
pub(crate) fn report_of(proc: &mut Proc) -> Report {
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
pub(crate) fn final_word(proc: &mut Proc) -> Result<(bool, String), String> {
    report_of(proc).result
}
