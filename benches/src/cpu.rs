//! CPU time per operation, on the client and on the server, from Linux's
//! `/proc`: where a throughput point's two cores went.
//!
//! When the client, the server and the peer they are compared with share
//! the machine's cores and every core is busy, operations per second is the
//! inverse of CPU time per operation. So a throughput ratio against a peer is
//! explained by comparing each side's CPU per operation: this process's own
//! (the bench's clients and the guard), the server's (every process of that
//! name, with the children it has reaped, so a backend that exited is still
//! counted), and, for a peer run as a child process (pgbench,
//! redis-benchmark), the children this process has waited for.
//!
//! Everything reads zero where `/proc` is not there.

use std::fs;
use std::time::Duration;

/// CPU time used so far by this process, its waited-for children, and the
/// processes named `server`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// This process (user and system).
    pub own: Duration,
    /// This process's children that it has waited for.
    pub children: Duration,
    /// Every process whose name is the server's, with their reaped
    /// children.
    pub server: Duration,
}

/// Clock ticks per second, as `/proc` counts them (`getconf CLK_TCK`: 100
/// on Linux).
const TICKS: u64 = 100;

/// Reads the CPU times now; `server` is a process name as `/proc/PID/comm`
/// gives it (`postgres`, `redis-server`), or empty for none.
pub fn sample(server: &str) -> Sample {
    let (own, children) = times("/proc/self/stat").unwrap_or_default();
    let mut total = 0;
    let entries = fs::read_dir("/proc").ok().filter(|_| !server.is_empty());
    if let Some(entries) = entries {
        for entry in entries.flatten() {
            let path = entry.path();
            let is_pid = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
            if !is_pid {
                continue;
            }
            let named = fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == server);
            if named && let Some((used, reaped)) = times(path.join("stat")) {
                total += used + reaped;
            }
        }
    }
    Sample {
        own: ticks(own),
        children: ticks(children),
        server: ticks(total),
    }
}

/// Microseconds of CPU per operation on each side between two samples.
#[derive(Debug, Clone, Copy)]
pub struct PerOp {
    /// This process's.
    pub own: f64,
    /// The waited-for children's (a peer run as a child).
    pub children: f64,
    /// The server's.
    pub server: f64,
}

impl PerOp {
    /// The CPU per operation between `before` and `after`, over `ops`
    /// operations.
    pub fn between(before: Sample, after: Sample, ops: f64) -> PerOp {
        let per = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64() * 1e6 / ops;
        PerOp {
            own: per(after.own, before.own),
            children: per(after.children, before.children),
            server: per(after.server, before.server),
        }
    }
}

/// A peer's two cells of a CPU table, its own and the server's µs per
/// operation, or `n/a` for a peer that did not run.
pub fn peer_cells(peer: Option<PerOp>) -> [String; 2] {
    peer.map_or(["n/a".to_owned(), "n/a".to_owned()], |p| {
        [format!("{:.1}", p.children), format!("{:.1}", p.server)]
    })
}

/// (user + system, reaped children's user + system) in ticks, from a
/// `stat` file.
fn times(path: impl AsRef<std::path::Path>) -> Option<(u64, u64)> {
    let stat = fs::read_to_string(path).ok()?;
    // The command name is in parentheses and may hold spaces: count the
    // fields after its closing one. utime, stime, cutime, cstime are fields
    // 14 to 17, so 12 to 15 after the state (field 3).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(4)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let [utime, stime, cutime, cstime] = fields[..] else {
        return None;
    };
    Some((utime + stime, cutime + cstime))
}

fn ticks(n: u64) -> Duration {
    Duration::from_millis(n * 1000 / TICKS)
}
