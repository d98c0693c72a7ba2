//! The MCP gateway over stdio, beside the same upstream called directly by
//! the same client: what a guarded call adds to a tool call's latency, and
//! the calls per second of a tool the gateway passes straight through.
//!
//! ```sh
//! CARGO_INCREMENTAL=0 cargo build --release -p idempotent-tools-cli
//! cargo build --release -p idempotent-benches --example mcp_upstream
//! cargo bench -p idempotent-benches --bench gateway
//! ```
//!
//! One rmcp client process starts two MCP sessions over stdio: one with
//! `examples/mcp_upstream.rs` (two tools that answer at once, with no I/O),
//! one with `idempotent-tools gateway --config <file> -- mcp_upstream`,
//! whose file guards `refund_order` by `<run>:refund:<order_id>` with
//! claims in memory (no `--store`) and passes `get_order` through. Over
//! stdio the connection is the run, so the client sends no `_meta`. Every
//! `refund_order` call names a new order: each guarded call is a fresh
//! claim, its action and its completion.
//!
//! Three parts, in one process:
//!
//! 1. criterion: `direct/refund_order`, `gateway/refund_order`,
//!    `direct/get_order`, `gateway/get_order`, one call per iteration;
//! 2. latency percentiles (criterion gives no p99): `GATEWAY_ROUNDS`
//!    rounds (default 3) of `GATEWAY_CALLS` iterations (default 2,000), each
//!    iteration one call of each of the four, their order rotated every
//!    iteration, every call timed alone;
//! 3. throughput of the pass-through tool: `get_order` calls per second,
//!    with 1 and 16 calls in flight, direct and through the gateway in
//!    alternating windows of `GATEWAY_WINDOW_MS` (default 500), four windows
//!    each per round, with the CPU time each process (client, gateway,
//!    upstream) spends per call, read from `/proc` on Linux.
//!
//! The binaries are found under the workspace's `target/release` (or
//! `$CARGO_TARGET_DIR/release`), or named by `IDEMPOTENT_TOOLS_BIN` and
//! `MCP_UPSTREAM_BIN`.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use idempotent_benches::multi_thread;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::runtime::Runtime;

/// The gateway's configuration: one guarded tool, claims in memory.
const CONFIG: &str = r#"[tools.refund_order]
key = "<run>:refund:<order_id>"
"#;

/// Where the gateway says what it did with a guarded call.
const STATUS_META_KEY: &str = "idempotent/status";

/// Calls in flight in the throughput part.
const IN_FLIGHT: [usize; 2] = [1, 16];

/// Windows per variant, per round and number in flight, of the throughput
/// part.
const WINDOWS: usize = 4;

type Client = RunningService<RoleClient, ()>;

/// Order ids never repeat: every guarded call is a fresh claim.
static NEXT_ORDER: AtomicU64 = AtomicU64::new(1);

fn refund() -> CallToolRequestParams {
    let order = NEXT_ORDER.fetch_add(1, Ordering::Relaxed);
    refund_of(order)
}

fn refund_of(order: u64) -> CallToolRequestParams {
    let args = json!({ "order_id": format!("ord-{order}"), "amount_cents": 4200 });
    with_arguments("refund_order", args)
}

fn get_order() -> CallToolRequestParams {
    with_arguments("get_order", json!({ "order_id": "ord-1182" }))
}

fn with_arguments(tool: &'static str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        unreachable!("a JSON object")
    };
    CallToolRequestParams::new(tool).with_arguments(args)
}

/// One `tools/call`, which must come back a result that is no error.
async fn call(peer: &Peer<RoleClient>, params: CallToolRequestParams) -> CallToolResult {
    let result = peer
        .call_tool(params)
        .await
        .unwrap_or_else(|e| panic!("tools/call failed: {e}"));
    assert_ne!(result.is_error, Some(true), "the tool failed: {result:?}");
    result
}

fn status(result: &CallToolResult) -> Option<&str> {
    result.meta.as_ref()?.get(STATUS_META_KEY)?.as_str()
}

/// The two binaries, or the commands that build them.
struct Binaries {
    gateway: PathBuf,
    upstream: PathBuf,
}

impl Binaries {
    fn find() -> Result<Binaries, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .to_path_buf();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(|dir| root.join(dir))
            .unwrap_or_else(|| root.join("target"));
        let release = target.join("release");
        let exe = std::env::consts::EXE_SUFFIX;
        let gateway = std::env::var_os("IDEMPOTENT_TOOLS_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| release.join(format!("idempotent-tools{exe}")));
        let upstream = std::env::var_os("MCP_UPSTREAM_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| release.join("examples").join(format!("mcp_upstream{exe}")));
        let mut missing = Vec::new();
        if !gateway.is_file() {
            missing.push(format!(
                "  {} is missing: cargo build --release -p idempotent-tools-cli \
                 (or set IDEMPOTENT_TOOLS_BIN)",
                gateway.display()
            ));
        }
        if !upstream.is_file() {
            missing.push(format!(
                "  {} is missing: cargo build --release -p idempotent-benches --example \
                 mcp_upstream (or set MCP_UPSTREAM_BIN)",
                upstream.display()
            ));
        }
        if missing.is_empty() {
            Ok(Binaries { gateway, upstream })
        } else {
            Err(missing.join("\n"))
        }
    }
}

/// Starts `command` and an MCP session with it over its stdin and stdout;
/// its stderr is this process's.
/// Its process id too.
async fn connect(command: Command) -> (Client, Option<u32>) {
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the server: {e}"));
    let pid = transport.id();
    let client = ()
        .serve(transport)
        .await
        .unwrap_or_else(|e| panic!("the MCP session did not start: {e}"));
    (client, pid)
}

/// The processes whose CPU time the throughput part reads, by id.
#[derive(Debug, Clone, Copy, Default)]
struct Pids {
    /// This process, the client of both sessions.
    client: u32,
    /// The upstream the client calls directly.
    direct: Option<u32>,
    /// The gateway.
    gateway: Option<u32>,
    /// The upstream the gateway started.
    behind: Option<u32>,
}

/// CPU time a process has used, user and system, its threads together,
/// from `/proc` (Linux); `None` elsewhere.
fn cpu_time(pid: Option<u32>) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid?)).ok()?;
    // The fields after the command's name, which ends at the last `)`:
    // utime and stime are the 14th and 15th of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let ticks: u64 = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux that ships today.
    Some(Duration::from_millis(ticks * 10))
}

/// The first child of a process, from `/proc` (Linux).
fn first_child(pid: Option<u32>) -> Option<u32> {
    let pid = pid?;
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

struct Sessions {
    direct: Client,
    gateway: Client,
    pids: Pids,
    /// The gateway's configuration file, removed at the end.
    _config: tempfile::NamedTempFile,
}

impl Sessions {
    async fn start(binaries: &Binaries) -> Sessions {
        let mut config = tempfile::Builder::new()
            .prefix("gateway-bench-")
            .suffix(".toml")
            .tempfile()
            .unwrap_or_else(|e| panic!("cannot create the configuration file: {e}"));
        std::io::Write::write_all(&mut config, CONFIG.as_bytes())
            .unwrap_or_else(|e| panic!("cannot write the configuration file: {e}"));
        let (direct, direct_pid) = connect(Command::new(&binaries.upstream)).await;
        let mut gateway = Command::new(&binaries.gateway);
        gateway
            .arg("gateway")
            .arg("--config")
            .arg(config.path())
            .arg("--")
            .arg(&binaries.upstream);
        let (gateway, gateway_pid) = connect(gateway).await;
        let pids = Pids {
            client: std::process::id(),
            direct: direct_pid,
            gateway: gateway_pid,
            behind: first_child(gateway_pid),
        };
        Sessions {
            direct,
            gateway,
            pids,
            _config: config,
        }
    }

    /// The gateway guards `refund_order` (a fresh call, then a replay of
    /// the same order) and passes `get_order` through untouched; the
    /// upstream alone does neither.
    async fn check(&self) {
        let order = u64::MAX - 1;
        let first = call(self.gateway.peer(), refund_of(order)).await;
        let again = call(self.gateway.peer(), refund_of(order)).await;
        assert_eq!(status(&first), Some("fresh"), "{first:?}");
        assert_eq!(status(&again), Some("replay"), "{again:?}");
        let read = call(self.gateway.peer(), get_order()).await;
        assert_eq!(status(&read), None, "{read:?}");
        let direct = call(self.direct.peer(), refund_of(order)).await;
        assert_eq!(status(&direct), None, "{direct:?}");
    }

    async fn stop(self) {
        let _ = self.gateway.cancel().await;
        let _ = self.direct.cancel().await;
    }
}

/// Part 1: criterion, each variant for seconds before the next.
fn criterion_part(c: &mut Criterion, rt: &Runtime, sessions: &Sessions) {
    let direct = sessions.direct.peer();
    let gateway = sessions.gateway.peer();
    for (tool, make) in [
        ("refund_order", refund as fn() -> CallToolRequestParams),
        ("get_order", get_order),
    ] {
        for (side, peer) in [("direct", direct), ("gateway", gateway)] {
            let mut group = c.benchmark_group(side);
            group.bench_function(tool, |b| b.to_async(rt).iter(|| call(peer, make())));
            group.finish();
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median and range, as `median (min–max)`.
fn summary(values: &mut [f64], digits: usize) -> String {
    values.sort_by(f64::total_cmp);
    let median = if values.len() % 2 == 1 {
        values[values.len() / 2]
    } else {
        (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
    };
    format!(
        "{median:.digits$} ({:.digits$}–{:.digits$})",
        values[0],
        values[values.len() - 1]
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Part 2: every call timed alone, the four variants interleaved.
fn latency_part(rt: &Runtime, sessions: &Sessions) {
    let rounds = env_usize("GATEWAY_ROUNDS", 3);
    let calls = env_usize("GATEWAY_CALLS", 2_000);
    let peers = [
        sessions.direct.peer(),
        sessions.gateway.peer(),
        sessions.direct.peer(),
        sessions.gateway.peer(),
    ];
    println!(
        "\nlatency, {rounds} rounds × {calls} iterations, each one call of each variant in \
         rotated order (µs; load {})",
        load_average()
    );
    println!(
        "{:>5} {:>21} {:>21} {:>21} {:>21} | {:>9} {:>9} {:>10} {:>10} {:>7}",
        "round",
        "direct/refund p50 p99",
        "gateway/refund p50 p99",
        "direct/get p50 p99",
        "gateway/get p50 p99",
        "added p50",
        "added p99",
        "paired p50",
        "paired p99",
        "hop p50"
    );
    let (mut added_p50, mut added_p99, mut hop_p50, mut guard_p50) =
        (vec![], vec![], vec![], vec![]);
    let (mut paired_p50, mut paired_p99, mut guarded_p99) = (vec![], vec![], vec![]);
    for round in 1..=rounds {
        let mut times: [Vec<Duration>; 4] = Default::default();
        // Each iteration's guarded call less its direct one, µs.
        let mut paired: Vec<f64> = Vec::with_capacity(calls);
        rt.block_on(async {
            // A tenth more iterations, the first of them a warm-up.
            let warm_up = calls / 10;
            for i in 0..calls + warm_up {
                let mut took = [Duration::ZERO; 4];
                for k in 0..4 {
                    let v = (i + k) % 4;
                    let params = if v < 2 { refund() } else { get_order() };
                    let start = Instant::now();
                    call(peers[v], params).await;
                    took[v] = start.elapsed();
                }
                if i >= warm_up {
                    paired.push(us(took[1]) - us(took[0]));
                    for (v, t) in took.into_iter().enumerate() {
                        times[v].push(t);
                    }
                }
            }
        });
        for t in &mut times {
            t.sort();
        }
        let p50: Vec<f64> = times.iter().map(|t| us(percentile(t, 0.50))).collect();
        let p99: Vec<f64> = times.iter().map(|t| us(percentile(t, 0.99))).collect();
        paired.sort_by(f64::total_cmp);
        let paired_at = |p: f64| {
            let rank = ((paired.len() as f64) * p).ceil() as usize;
            paired[rank.clamp(1, paired.len()) - 1]
        };
        let (pp50, pp99) = (paired_at(0.50), paired_at(0.99));
        paired_p50.push(pp50);
        paired_p99.push(pp99);
        guarded_p99.push(p99[1]);
        added_p50.push(p50[1] - p50[0]);
        added_p99.push(p99[1] - p99[0]);
        hop_p50.push(p50[3] - p50[2]);
        guard_p50.push(p50[1] - p50[3]);
        println!(
            "{round:>5} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0} | {:>9.0} {:>9.0} {pp50:>10.0} {pp99:>10.0} {:>7.0}",
            p50[0],
            p99[0],
            p50[1],
            p99[1],
            p50[2],
            p99[2],
            p50[3],
            p99[3],
            p50[1] - p50[0],
            p99[1] - p99[0],
            p50[3] - p50[2],
        );
    }
    println!(
        "added latency per guarded call (gateway/refund_order − direct/refund_order), µs, median \
         (range) over rounds: p50 {}, p99 {}",
        summary(&mut added_p50, 0),
        summary(&mut added_p99, 0)
    );
    println!(
        "  paired, each iteration's guarded call less its direct one, µs: p50 {}, p99 {}; the \
         guarded call's own p99 through the gateway {}",
        summary(&mut paired_p50, 0),
        summary(&mut paired_p99, 0),
        summary(&mut guarded_p99, 0)
    );
    println!(
        "  of which the pass-through hop (gateway/get_order − direct/get_order, p50) {} and the \
         guard (gateway/refund_order − gateway/get_order, p50) {}; load {}",
        summary(&mut hop_p50, 0),
        summary(&mut guard_p50, 0),
        load_average()
    );
}

/// `get_order` calls completed in `window` with `in_flight` calls kept in
/// flight on one session, and the time they took.
async fn calls_in(peer: &Peer<RoleClient>, in_flight: usize, window: Duration) -> (u64, Duration) {
    let start = Instant::now();
    let deadline = start + window;
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let peer = peer.clone();
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    call(&peer, get_order()).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut done = 0;
    for task in tasks {
        done += task
            .await
            .unwrap_or_else(|e| panic!("a caller panicked: {e}"));
    }
    (done, start.elapsed())
}

/// What one side did over its windows: calls, wall time, and the CPU time
/// of each process it involves (client, gateway, upstream).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    calls: u64,
    wall: Duration,
    cpu: [Duration; 3],
}

impl Tally {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.wall.as_secs_f64()
    }

    /// CPU microseconds per call, by process, and their sum.
    fn cpu_per_call(&self) -> [f64; 4] {
        let [a, b, c] = self.cpu.map(|t| us(t) / self.calls as f64);
        [a, b, c, a + b + c]
    }
}

/// One window of one side, its CPU time read around it.
async fn window_of(
    tally: &mut Tally,
    peer: &Peer<RoleClient>,
    pids: [Option<u32>; 3],
    in_flight: usize,
    window: Duration,
) {
    let before = pids.map(cpu_time);
    let (calls, wall) = calls_in(peer, in_flight, window).await;
    let after = pids.map(cpu_time);
    tally.calls += calls;
    tally.wall += wall;
    for i in 0..3 {
        if let (Some(a), Some(b)) = (after[i], before[i]) {
            tally.cpu[i] += a.saturating_sub(b);
        }
    }
}

/// Part 3: the pass-through tool's calls per second, the two sessions in
/// alternating windows, and the CPU time each process spent per call.
fn throughput_part(rt: &Runtime, sessions: &Sessions) {
    let rounds = env_usize("GATEWAY_ROUNDS", 3);
    let window = Duration::from_millis(env_usize("GATEWAY_WINDOW_MS", 500) as u64);
    let pids = sessions.pids;
    let direct_pids = [Some(pids.client), None, pids.direct];
    let gateway_pids = [Some(pids.client), pids.gateway, pids.behind];
    println!(
        "\nthroughput of get_order (passed through), calls/s, {rounds} rounds × {WINDOWS} \
         alternating windows of {window:?} per side (load {})",
        load_average()
    );
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); IN_FLIGHT.len()];
    let mut totals = vec![[Tally::default(); 2]; IN_FLIGHT.len()];
    for round in 1..=rounds {
        for (n, &in_flight) in IN_FLIGHT.iter().enumerate() {
            let (mut direct, mut gateway) = (Tally::default(), Tally::default());
            rt.block_on(async {
                for w in 0..WINDOWS {
                    for gateway_first in [w % 2 == 1, w % 2 == 0] {
                        if gateway_first {
                            let peer = sessions.gateway.peer();
                            window_of(&mut gateway, peer, gateway_pids, in_flight, window).await;
                        } else {
                            let peer = sessions.direct.peer();
                            window_of(&mut direct, peer, direct_pids, in_flight, window).await;
                        }
                    }
                }
            });
            let ratio = gateway.rate() / direct.rate();
            ratios[n].push(ratio);
            for (total, side) in totals[n].iter_mut().zip([direct, gateway]) {
                total.calls += side.calls;
                total.wall += side.wall;
                for i in 0..3 {
                    total.cpu[i] += side.cpu[i];
                }
            }
            println!(
                "  round {round}, {in_flight:>2} in flight: direct {:>8.0}/s, gateway {:>8.0}/s: \
                 {ratio:.3}×",
                direct.rate(),
                gateway.rate(),
            );
        }
    }
    for (n, in_flight) in IN_FLIGHT.iter().enumerate() {
        println!(
            "unguarded throughput, gateway ÷ direct, {in_flight} in flight, median (range) over \
             rounds: {}×",
            summary(&mut ratios[n], 3)
        );
        let [direct, gateway] = totals[n];
        if cpu_time(Some(pids.client)).is_some() {
            let [dc, _, du, dt] = direct.cpu_per_call();
            let [gc, gg, gu, gt] = gateway.cpu_per_call();
            println!(
                "  CPU µs per call, all rounds: direct: client {dc:.0} + upstream {du:.0} = \
                 {dt:.0}; through the gateway: client {gc:.0} + gateway {gg:.0} + upstream \
                 {gu:.0} = {gt:.0} ({:.2}× the CPU)",
                gt / dt
            );
        }
    }
    println!("load {}", load_average());
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // criterion then runs each benchmark once, as a test (as it does with
    // `--test`), and so does this benchmark's check.
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|arg| arg == "--bench")
        && !args.iter().any(|arg| arg == "--test" || arg == "--list");
    let binaries = match Binaries::find() {
        Ok(binaries) => binaries,
        Err(missing) => {
            eprintln!(
                "the gateway benchmark needs two release builds:\n{missing}\n\nbuild them with:\n  \
                 cargo build --release -p idempotent-tools-cli\n  cargo build --release -p \
                 idempotent-benches --example mcp_upstream"
            );
            return if benching {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let rt = multi_thread();
    let sessions = rt.block_on(Sessions::start(&binaries));
    rt.block_on(sessions.check());
    println!(
        "gateway: {}\nupstream: {}",
        binaries.gateway.display(),
        binaries.upstream.display()
    );
    let mut c = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    criterion_part(&mut c, &rt, &sessions);
    c.final_summary();
    if benching {
        latency_part(&rt, &sessions);
        throughput_part(&rt, &sessions);
    }
    rt.block_on(sessions.stop());
    ExitCode::SUCCESS
}
