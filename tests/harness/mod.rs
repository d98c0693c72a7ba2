//! A test harness for cases that need a server: each case is a trial that
//! runs when the server's address is set, is reported as *ignored* (with the
//! reason) when it is not, and fails in CI, where a missing server is a
//! broken set-up, never a pass.
//!
//! A test file that uses it sets `harness = false` and ends in
//! `harness::main(vec![..])`, listing its cases with [`trials!`].
#![allow(dead_code)]

use std::future::Future;

pub use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// A trial of `case`, run on a multi-thread runtime, when the environment
/// variable `needs` is set.
pub fn trial<F, Fut>(name: &str, needs: &'static str, case: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    Trial::ignorable_test(name, move || {
        if std::env::var_os(needs).is_none() {
            if std::env::var_os("CI").is_some() {
                return Err(
                    format!("{needs} must be set in CI: this case needs its server").into(),
                );
            }
            return Ok(Completion::ignored_with(format!("needs {needs}")));
        }
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .map_err(|e| Failed::from(format!("a runtime: {e}")))?
            .block_on(case());
        Ok(Completion::Completed)
    })
}

/// A trial of `case` that also needs a program of this machine's
/// (`program`, with whether it is there): without it the trial is reported
/// ignored ("needs `program`"). Say it is there when `CI` is set, so that
/// the case runs there, and fails without it.
pub fn trial_needing<F, Fut>(
    name: &str,
    needs: &'static str,
    (program, there): (&'static str, bool),
    case: F,
) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    if !there {
        return Trial::ignorable_test(name, move || {
            Ok(Completion::ignored_with(format!("needs `{program}`")))
        });
    }
    trial(name, needs, case)
}

/// A port free a moment ago, for a server a case starts and may restart.
///
/// It comes from below the range the system hands out for outgoing
/// connections, so that no client's socket takes it before its server
/// starts (or while it is down for a restart), and no port is handed out
/// twice in one process: servers started at the same time never share one.
pub fn free_port() -> u16 {
    use std::net::TcpListener;
    use std::sync::Mutex;
    // This process's walk through the ports below that range, from LOWEST:
    // it starts at a place of the process's own, so that two test
    // processes at once start far apart.
    static NEXT: Mutex<Option<u32>> = Mutex::new(None);
    const LOWEST: u32 = 10_000;
    let outgoing = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let span = outgoing.min(65536).saturating_sub(LOWEST);
    if span < 1_000 {
        // No room below that range: any port the system finds free.
        return TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
    }
    let mut next = NEXT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let start = *next.get_or_insert(std::process::id().wrapping_mul(7919) % span);
    for step in 0..span {
        let offset = (start + step) % span;
        let port = u16::try_from(LOWEST + offset).expect("a port below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            *next = Some((offset + 1) % span);
            return port;
        }
    }
    panic!("no free port from {LOWEST} to {}", LOWEST + span)
}

/// Whether `program` is on this machine's PATH and answers `--version`.
pub fn on_path(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A trial of `case` that needs no server: it always runs.
pub fn always<F, Fut>(name: &str, case: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    Trial::test(name, move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .map_err(|e| Failed::from(format!("a runtime: {e}")))?
            .block_on(case());
        Ok(())
    })
}

/// A trial of a case that needs no runtime.
pub fn plain(name: &str, case: fn()) -> Trial {
    Trial::test(name, move || {
        case();
        Ok(())
    })
}

/// Runs the trials as `cargo test` runs tests: the same arguments, filters
/// and summary, one trial per core at a time unless `--test-threads` or
/// `RUST_TEST_THREADS` says otherwise.
pub fn main(trials: Vec<Trial>) -> ! {
    run(trials, None)
}

/// How many trials of a suite that spends its time waiting run at once.
pub const WAITING_THREADS: usize = 8;

/// [`main`] for a suite whose cases spend their time waiting, on leases
/// running out and on a server's answers, not computing: they run
/// [`WAITING_THREADS`] at a time, unless `--test-threads` or
/// `RUST_TEST_THREADS` says otherwise. (On two cores the storm suite takes
/// 41 s one case per core and 14 s this way, using 3 s of CPU either way.)
pub fn main_waiting(trials: Vec<Trial>) -> ! {
    run(trials, Some(WAITING_THREADS))
}

fn run(trials: Vec<Trial>, threads: Option<usize>) -> ! {
    let mut args = Arguments::from_args();
    // libtest-mimic reads `--test-threads` but not the variable libtest
    // reads too.
    args.test_threads = args.test_threads.or_else(|| {
        std::env::var("RUST_TEST_THREADS")
            .ok()
            .and_then(|n| n.parse().ok())
            .or(threads)
    });
    libtest_mimic::run(&args, trials).exit()
}

/// Trials of async functions that take nothing: `trials!(NEEDS; case, ..)`,
/// or `trials!(always; case, ..)` for cases that need no server;
/// `trials!(plain; ..)` for functions that are not async;
/// `trials!(NEEDS, (program, there); case, ..)` for cases that also run a
/// program of their own (see [`trial_needing`]).
#[macro_export]
macro_rules! trials {
    ($needs:expr, $program:expr; $($case:path),* $(,)?) => {
        vec![$(
            $crate::harness::trial_needing(
                $crate::harness::last_segment(stringify!($case)),
                $needs,
                $program,
                $case,
            ),
        )*]
    };
    (plain; $($case:path),* $(,)?) => {
        vec![$(
            $crate::harness::plain($crate::harness::last_segment(stringify!($case)), $case),
        )*]
    };
    (always; $($case:path),* $(,)?) => {
        vec![$(
            $crate::harness::always($crate::harness::last_segment(stringify!($case)), || $case()),
        )*]
    };
    ($needs:expr; $($case:path),* $(,)?) => {
        vec![$(
            $crate::harness::trial(
                $crate::harness::last_segment(stringify!($case)),
                $needs,
                || $case(),
            ),
        )*]
    };
}

/// A case's name: the last segment of its path.
pub fn last_segment(path: &str) -> &str {
    path.rsplit("::").next().unwrap_or(path).trim()
}
