//! `idempotent-tools gateway` between real MCP peers: refund servers and
//! clients on the official TypeScript and Python SDKs (`../gateway/peers`),
//! over stdio and streamable HTTP. Refunds are counted in the servers'
//! ledger, never in what a client was told.
//!
//! The peers need `node` and `python3`; their packages are installed once,
//! by the peers' `setup.sh`, from the npm registry and PyPI. Without them a
//! case is reported as ignored, and in CI it fails.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use libtest_mimic::{Completion, Failed, Trial};
use serde_json::{Value, json};

use crate::harness::on_path;
use crate::run::BIN;

const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gateway/peers");

/// A language with an official MCP SDK.
#[derive(Clone, Copy, Debug)]
pub enum Sdk {
    TypeScript,
    Python,
}

const BOTH: [Sdk; 2] = [Sdk::TypeScript, Sdk::Python];

impl Sdk {
    fn program(self) -> (String, &'static str) {
        match self {
            Sdk::TypeScript => ("node".to_owned(), "mjs"),
            Sdk::Python => (format!("{PEERS}/.venv/bin/python"), "py"),
        }
    }

    /// The refund server's command line.
    fn server(self) -> Vec<String> {
        let (program, ext) = self.program();
        vec![program, format!("{PEERS}/refund_server.{ext}")]
    }

    fn client(self) -> Vec<String> {
        let (program, ext) = self.program();
        vec![program, format!("{PEERS}/client.{ext}")]
    }
}

/// Installs the peers' packages, once per test run.
fn set_up() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let out = Command::new("bash")
            .arg(format!("{PEERS}/setup.sh"))
            .output()
            .map_err(|e| format!("setup.sh did not run: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "setup.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    })
    .clone()
}

/// A trial that needs the peers: ignored without `node` and `python3`,
/// failed without them in CI.
pub fn trial(name: &str, case: fn()) -> Trial {
    Trial::ignorable_test(name, move || {
        if !on_path("node") || !on_path("python3") {
            if std::env::var_os("CI").is_some() {
                return Err(
                    "node and python3 must be there in CI: the gateway's peers need them".into(),
                );
            }
            return Ok(Completion::ignored_with("needs `node` and `python3`"));
        }
        set_up().map_err(Failed::from)?;
        case();
        Ok(Completion::Completed)
    })
}

/// A trial that also needs Postgres.
pub fn trial_postgres(name: &str, case: fn()) -> Trial {
    if std::env::var_os(crate::postgres::URL).is_none() && std::env::var_os("CI").is_none() {
        return Trial::ignorable_test(name, move || {
            Ok(Completion::ignored_with(format!(
                "needs {}",
                crate::postgres::URL
            )))
        });
    }
    trial(name, case)
}

/// A case's files: the configuration, the ledger the servers append each
/// refund to, and a SQLite store.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new(config: &str) -> Scene {
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(dir.path().join("gateway.toml"), config).expect("the configuration");
        Scene { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn config(&self) -> String {
        self.path("gateway.toml")
    }

    fn ledger(&self) -> String {
        self.path("ledger.jsonl")
    }

    fn store(&self) -> String {
        self.path("claims.db")
    }

    /// The refunds that reached the servers.
    fn refunds(&self) -> Vec<Value> {
        std::fs::read_to_string(self.ledger())
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a ledger line"))
            .collect()
    }

    /// The gateway over stdio in front of `server`, as a client starts it.
    fn stdio_gateway(&self, store: &str, server: Sdk) -> Vec<String> {
        let mut command = vec![
            BIN.to_owned(),
            "--store".to_owned(),
            store.to_owned(),
            "gateway".to_owned(),
            "--config".to_owned(),
            self.config(),
            "--".to_owned(),
        ];
        command.extend(server.server());
        command
    }
}

fn refund(order: &str, reason: &str) -> String {
    json!({"name": "refund_order", "arguments": {"order_id": order, "amount_cents": 4200, "reason": reason}})
        .to_string()
}

/// Runs a client and reads what it printed, one JSON value a line.
fn client(sdk: Sdk, scene: &Scene, env: &[(&str, &str)], args: &[String]) -> (i32, Vec<Value>) {
    let command = sdk.client();
    let out = Command::new(&command[0])
        .args(&command[1..])
        .args(args)
        .env("REFUND_LEDGER", scene.ledger())
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "{sdk:?} client printed {line:?} ({e}); stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
        })
        .collect();
    (out.status.code().unwrap_or(-1), lines)
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|part| part.to_string()).collect()
}

fn status(result: &Value) -> &str {
    result["meta"]["idempotent/status"].as_str().unwrap_or("")
}

const REFUND_CONFIG: &str = r#"
[tools.refund_order]
key = "<run>:refund:<order_id>"
"#;

/// The essay's three cases, over stdio, for every server and client:
/// two identical calls in one step, the same call in a later step (a
/// new connection naming the same run), and a failure after the refund
/// then a retry. One refund each, at the server.
pub fn three_cases_over_stdio_refund_once_for_every_server_and_client() {
    for server in BOTH {
        for sdk in BOTH {
            let scene = Scene::new(REFUND_CONFIG);
            let store = scene.store();
            let gateway = scene.stdio_gateway(&store, server);
            let run = format!("run-{server:?}-{sdk:?}");
            let within = |calls: &[String], parallel: bool| {
                let mut line = args(&["--run", &run]);
                if parallel {
                    line.push("--parallel".into());
                }
                for call in calls {
                    line.extend(["--call".to_owned(), call.clone()]);
                }
                line.extend(["--stdio".to_owned(), "--".to_owned()]);
                line.extend(gateway.iter().cloned());
                line
            };
            let what = format!("{server:?} server, {sdk:?} client");

            // One step, two calls at once, each worded its own way.
            let (code, results) = client(
                sdk,
                &scene,
                &[],
                &within(
                    &[refund("1", "customer asked"), refund("1", "as asked")],
                    true,
                ),
            );
            assert_eq!(code, 0, "{what}: {results:?}");
            let mut statuses: Vec<&str> = results.iter().map(status).collect();
            statuses.sort();
            assert_eq!(statuses, ["fresh", "replay"], "{what}: {results:?}");
            assert_eq!(results[0]["content"][0], results[1]["content"][0], "{what}");

            // A later step: a new connection, the same run.
            let (_, later) = client(sdk, &scene, &[], &within(&[refund("1", "again")], false));
            assert_eq!(status(&later[0]), "replay", "{what}: {later:?}");
            assert_eq!(later[0]["isError"], false, "{what}");

            // Another amount on the same order: the first refund, and why
            // nothing new was done.
            let other = json!({"name": "refund_order", "arguments": {"order_id": "1", "amount_cents": 4100, "reason": "x"}});
            let (_, conflict) = client(sdk, &scene, &[], &within(&[other.to_string()], false));
            assert_eq!(status(&conflict[0]), "conflict", "{what}: {conflict:?}");
            assert_eq!(
                conflict[0]["content"][0], results[0]["content"][0],
                "{what}"
            );
            assert!(
                conflict[0]["content"][1]
                    .as_str()
                    .is_some_and(|note| note.contains("different details")),
                "{what}: {conflict:?}"
            );

            // The server refunds, then fails; the model retries.
            let failing = [("REFUND_FAIL_AFTER_FIRST", "1")];
            let (_, first) = client(sdk, &scene, &failing, &within(&[refund("2", "x")], false));
            assert_eq!(first[0]["isError"], true, "{what}: {first:?}");
            assert_eq!(status(&first[0]), "unknown", "{what}: {first:?}");
            let (_, retry) = client(sdk, &scene, &failing, &within(&[refund("2", "y")], false));
            assert_eq!(status(&retry[0]), "unknown", "{what}: {retry:?}");

            let refunds = scene.refunds();
            let of = |order: &str| refunds.iter().filter(|r| r["order_id"] == order).count();
            assert_eq!((of("1"), of("2")), (1, 1), "{what}: {refunds:?}");
            // The key reached the server in `_meta`.
            assert!(
                refunds[0]["meta_key"]
                    .as_str()
                    .is_some_and(|key| key.ends_with(":refund:1")),
                "{what}: {refunds:?}"
            );
        }
    }
}

/// A process whose stderr is read line by line on a thread of its own.
struct Watched {
    child: Child,
    lines: Receiver<String>,
}

impl Watched {
    fn spawn(mut command: Command) -> Watched {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stderr: ChildStderr = child.stderr.take().expect("stderr");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Watched { child, lines }
    }

    /// Waits for a line of stderr that contains `text`, and returns it.
    fn wait_for(&self, text: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(err) => panic!("no line with {text:?} on stderr: {err}"),
            }
        }
    }

    /// The first line of stdout.
    fn first_line(&mut self) -> String {
        let stdout = self.child.stdout.as_mut().expect("stdout");
        let mut line = Vec::new();
        let mut byte = [0u8];
        while stdout.read(&mut byte).expect("read stdout") == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        String::from_utf8(line).expect("text")
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A refund server over streamable HTTP; its URL.
fn http_server(sdk: Sdk, scene: &Scene, env: &[(&str, &str)]) -> (Watched, String) {
    let command = sdk.server();
    let mut process = Command::new(&command[0]);
    process
        .args(&command[1..])
        .args(["--http", "0"])
        .env("REFUND_LEDGER", scene.ledger())
        .envs(env.iter().copied());
    let mut server = Watched::spawn(process);
    let line = server.first_line();
    let port = line
        .strip_prefix("listening ")
        .expect("listening <port>")
        .trim();
    let url = format!("http://127.0.0.1:{port}/mcp");
    (server, url)
}

/// The gateway over HTTP on a free port, in front of `upstream`; its URL.
fn http_gateway(
    scene: &Scene,
    store: &str,
    upstream: &[String],
    env: &[(&str, &str)],
) -> (Watched, String) {
    http_gateway_with(scene, store, upstream, env, &[])
}

/// [`http_gateway`] with more options on its command line.
fn http_gateway_with(
    scene: &Scene,
    store: &str,
    upstream: &[String],
    env: &[(&str, &str)],
    options: &[&str],
) -> (Watched, String) {
    let mut process = Command::new(BIN);
    process
        .args(["--store", store, "gateway", "--config"])
        .arg(scene.config())
        .args(["--listen", "127.0.0.1:0"])
        .args(options)
        .env("REFUND_LEDGER", scene.ledger())
        .env("RUST_LOG", "info")
        .envs(env.iter().copied());
    if upstream[0].starts_with("http") {
        process.args(["--upstream-url", &upstream[0]]);
    } else {
        process.arg("--").args(upstream);
    }
    let gateway = Watched::spawn(process);
    let line = gateway.wait_for("serving MCP at ");
    let url = line
        .split("serving MCP at ")
        .nth(1)
        .and_then(|rest| rest.split([';', ',']).next())
        .expect("the gateway's URL")
        .trim()
        .to_owned();
    (gateway, url)
}

/// The three cases over streamable HTTP at both ends, for every server
/// and client; the key reaches the server in `_meta` and as the
/// `Idempotency-Key` header.
pub fn three_cases_over_http_refund_once_and_pass_the_key_as_a_header() {
    for server in BOTH {
        for sdk in BOTH {
            let what = format!("{server:?} server, {sdk:?} client");
            let scene = Scene::new(REFUND_CONFIG);
            let (_upstream, upstream_url) = http_server(server, &scene, &[]);
            let (_gateway, url) = http_gateway(&scene, &scene.store(), &[upstream_url], &[]);
            let run = format!("run-{server:?}-{sdk:?}");
            let call = |calls: &[String], parallel: bool| {
                let mut line = args(&["--url", &url, "--run", &run]);
                if parallel {
                    line.push("--parallel".into());
                }
                for c in calls {
                    line.extend(["--call".to_owned(), c.clone()]);
                }
                client(sdk, &scene, &[], &line).1
            };
            let both = call(&[refund("1", "a"), refund("1", "b")], true);
            let mut statuses: Vec<&str> = both.iter().map(status).collect();
            statuses.sort();
            assert_eq!(statuses, ["fresh", "replay"], "{what}: {both:?}");
            assert_eq!(
                status(&call(&[refund("1", "c")], false)[0]),
                "replay",
                "{what}"
            );
            let refunds = scene.refunds();
            assert_eq!(refunds.len(), 1, "{what}: {refunds:?}");
            assert!(refunds[0]["meta_key"].is_string(), "{what}: {refunds:?}");
            assert_eq!(
                refunds[0]["header_key"], refunds[0]["meta_key"],
                "{what}: {refunds:?}"
            );
        }
    }
    // The failure after the refund, over HTTP, with each server.
    for server in BOTH {
        let scene = Scene::new(REFUND_CONFIG);
        let failing = [("REFUND_FAIL_AFTER_FIRST", "1")];
        let (_upstream, upstream_url) = http_server(server, &scene, &failing);
        let (_gateway, url) = http_gateway(&scene, &scene.store(), &[upstream_url], &[]);
        for reason in ["first", "retry"] {
            let line = args(&["--url", &url, "--run", "r", "--call", &refund("2", reason)]);
            let (_, results) = client(Sdk::TypeScript, &scene, &[], &line);
            assert_eq!(status(&results[0]), "unknown", "{server:?}: {results:?}");
        }
        assert_eq!(scene.refunds().len(), 1, "{server:?}");
    }
}

/// A gateway killed (SIGKILL) while the server is mid-refund, restarted on
/// the same store: the client's retry is told the outcome is unknown, and
/// does not refund again; an operator finds the key pending.
fn killed_mid_call(store: &str, scene: &Scene) {
    let config =
        "[tools.refund_order]\nkey = \"<run>:refund:<order_id>\"\nlease = \"1s\"\nwait = \"20s\"\n";
    std::fs::write(scene.config(), config).expect("config");
    let run = format!("killed-{}", std::process::id());
    let call = refund("7", "refund it");
    let hanging = [("REFUND_HANG_AFTER", "1")];
    let (mut gateway, url) = http_gateway(scene, store, &Sdk::TypeScript.server(), &hanging);
    let mut first = Command::new("node");
    first
        .arg(format!("{PEERS}/client.mjs"))
        .args(["--url", &url, "--run", &run, "--call", &call])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut first = first.spawn().expect("the first client");
    gateway.wait_for("recorded; hanging");
    gateway.child.kill().expect("SIGKILL the gateway");
    gateway.child.wait().expect("reaped");
    // The first client lost its gateway; its SDK would keep reconnecting.
    let _ = first.kill();
    let _ = first.wait();
    // The server the killed gateway started hangs on; stop it.
    for refund in scene.refunds() {
        if let Some(pid) = refund["pid"].as_i64() {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    }

    let (_gateway, url) = http_gateway(scene, store, &Sdk::TypeScript.server(), &[]);
    let (_, retry) = client(
        Sdk::Python,
        scene,
        &[],
        &args(&["--url", &url, "--run", &run, "--call", &call]),
    );
    assert_eq!(status(&retry[0]), "unknown", "{retry:?}");
    assert_eq!(retry[0]["isError"], true, "{retry:?}");
    assert_eq!(scene.refunds().len(), 1, "{:?}", scene.refunds());
    let pending = Command::new(BIN)
        .args(["--store", store, "pending", "--json"])
        .output()
        .expect("pending");
    let listed = String::from_utf8_lossy(&pending.stdout);
    assert!(listed.contains(&format!("{run}:refund:7")), "{listed}");
}

pub fn a_gateway_killed_mid_call_does_not_refund_twice_on_sqlite() {
    let scene = Scene::new("");
    let store = scene.store();
    killed_mid_call(&store, &scene);
}

pub fn a_gateway_killed_mid_call_does_not_refund_twice_on_postgres() {
    let scene = Scene::new("");
    let url = std::env::var(crate::postgres::URL).expect("the Postgres URL");
    killed_mid_call(&url, &scene);
}

const TOKENS: &str = r#"
[[auth.tokens]]
principal = "alice"
token = "alice-token-0123456789"

[[auth.tokens]]
principal = "bob"
token_env = "BOB_TOKEN"

[tools.refund_order]
key = "<run>:refund:<order_id>"
"#;

/// Two principals naming one run each get their own refund; a wrong
/// token gets 401, reaches neither the store nor the server.
pub fn principals_are_isolated_and_a_wrong_token_gets_401() {
    let scene = Scene::new(TOKENS);
    let store = scene.store();
    let bob = [("BOB_TOKEN", "bob-token-0123456789")];
    let (_gateway, url) = http_gateway(&scene, &store, &Sdk::Python.server(), &bob);
    let call = refund("9", "please");
    for (sdk, token) in [
        (Sdk::TypeScript, "alice-token-0123456789"),
        (Sdk::Python, "bob-token-0123456789"),
        (Sdk::Python, "alice-token-0123456789"),
    ] {
        let line = args(&[
            "--url", &url, "--token", token, "--run", "shared", "--call", &call,
        ]);
        let (code, results) = client(sdk, &scene, &[], &line);
        assert_eq!(code, 0, "{results:?}");
        assert!(
            ["fresh", "replay"].contains(&status(&results[0])),
            "{results:?}"
        );
    }
    assert_eq!(scene.refunds().len(), 2, "{:?}", scene.refunds());
    for sdk in BOTH {
        let line = args(&[
            "--url",
            &url,
            "--token",
            "wrong-token-0123456789",
            "--run",
            "shared",
            "--call",
            &refund("10", "x"),
        ]);
        let (code, printed) = client(sdk, &scene, &[], &line);
        assert_eq!(code, 3, "{sdk:?}: {printed:?}");
        assert_eq!(printed, [json!({"http_status": 401})], "{sdk:?}");
    }
    assert_eq!(scene.refunds().len(), 2);
    let stats = Command::new(BIN)
        .args(["--store", &store, "stats", "--json"])
        .output()
        .expect("stats");
    let stats: Value = serde_json::from_slice(&stats.stdout).expect("JSON");
    assert_eq!(stats["total"], 2, "{stats}");
}

/// Guarded tools are listed as idempotent; the rest of the server (another
/// tool, a resource, a prompt) passes through untouched.
pub fn guarded_tools_are_marked_and_the_rest_passes_through() {
    for server in BOTH {
        let scene = Scene::new(REFUND_CONFIG);
        let mut line = args(&["--list-tools", "--check-passthrough", "--stdio", "--"]);
        line.extend(scene.stdio_gateway(&scene.store(), server));
        let (code, printed) = client(Sdk::TypeScript, &scene, &[], &line);
        assert_eq!(code, 0, "{printed:?}");
        let tools = printed[0]["tools"].as_array().expect("tools");
        let hint = |name: &str| {
            tools
                .iter()
                .find(|t| t["name"] == name)
                .map(|t| t["annotations"]["idempotentHint"].clone())
        };
        assert_eq!(
            hint("refund_order"),
            Some(json!(true)),
            "{server:?}: {tools:?}"
        );
        assert_ne!(hint("get_order"), Some(json!(true)), "{server:?}");
        assert_eq!(
            printed[1],
            json!({"resource": "order 1182", "prompt": "Write a short apology to Ada.", "get_order": "order 1182: paid"}),
            "{server:?}"
        );
        assert!(scene.refunds().is_empty());
    }
}

/// Runs `gateway --check` with `config` in front of the TypeScript server.
fn check(config: &str) -> (i32, String) {
    let scene = Scene::new(config);
    let mut command = scene.stdio_gateway(&scene.store(), Sdk::TypeScript);
    command.insert(4, "--check".into());
    let out = Command::new(&command[0])
        .args(&command[1..])
        .env("REFUND_LEDGER", scene.ledger())
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .expect("run the gateway");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

/// Each refusal of a template against the server's schema, with what it
/// says; a malformed file and an unknown tool in one line each.
pub fn bad_configurations_are_refused_at_start_with_what_to_write() {
    let tool = |name: &str, key: &str| format!("[tools.{name}]\nkey = \"{key}\"\n");
    for (config, says) in [
        (
            tool("refund_order", "<run>:refund:<order>"),
            "names no property of the tool's input schema: `order` is not there; did you mean `<order_id>`?",
        ),
        (
            tool("refund_order", "<run>:refund:<reason>"),
            "`<reason>` reads like model-authored free text",
        ),
        (
            format!(
                "{}free_text = [\"order_id\"]\n",
                tool("refund_order", "<run>:refund:<order_id>")
            ),
            "`<order_id>` is the model's free text (`free_text` in [tools.refund_order] lists it)",
        ),
        (
            tool("log_call", "<run>:log:<tool_call_id>"),
            "`<tool_call_id>` is a tool-call id",
        ),
        (
            tool("price_quote", "<run>:quote:<amount>"),
            "`<amount>` is a JSON number, which may be a float",
        ),
        (
            tool("refund_order", "<run>:refund:<memo>"),
            "`<memo>` is optional in the tool's input schema and has no default",
        ),
        (
            tool("refund_order", "<run><order_id>"),
            "puts two placeholders together without a separator",
        ),
    ] {
        let (code, stderr) = check(&config);
        assert_eq!(code, 2, "{config}: {stderr}");
        assert!(stderr.contains("the configuration is refused"), "{stderr}");
        assert!(
            stderr.contains(says),
            "{config}\nexpected: {says}\ngot: {stderr}"
        );
    }
    // A default is keyed on: `currency` is optional with one.
    let (code, stderr) = check(&tool("refund_order", "<run>:refund:<order_id>:<currency>"));
    assert_eq!(code, 0, "{stderr}");

    let (code, stderr) = check(&tool("refund_ordr", "<run>:refund:<order_id>"));
    assert_eq!(code, 2);
    let line = stderr
        .lines()
        .find(|l| l.contains("[tools.refund_ordr]"))
        .expect(&stderr);
    assert!(
        line.contains("names no tool of the upstream; did you mean `[tools.refund_order]`?"),
        "{stderr}"
    );

    let (code, stderr) = check("[tools.refund_order]\nkee = \"<run>:refund:<order_id>\"\n");
    assert_eq!(code, 2);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("gateway.toml:2:1: unknown field `kee`"),
        "{stderr}"
    );
}

/// The server's tools change under a running gateway: the guarded tool no
/// longer passes its check, and is refused rather than passed through.
pub fn a_tool_whose_schema_changes_is_refused_after_the_recheck() {
    let scene = Scene::new(REFUND_CONFIG);
    let (_upstream, upstream_url) = http_server(Sdk::TypeScript, &scene, &[]);
    let (gateway, url) = http_gateway(&scene, &scene.store(), &[upstream_url], &[]);
    let rename = json!({"name": "rename_order_id", "arguments": {}}).to_string();
    let (_, changed) = client(
        Sdk::TypeScript,
        &scene,
        &[],
        &args(&["--url", &url, "--call", &rename]),
    );
    assert_eq!(changed[0]["isError"], false, "{changed:?}");
    gateway.wait_for("no longer passes its check");
    let line = args(&[
        "--url",
        &url,
        "--run",
        "r",
        "--list-tools",
        "--call",
        &refund("1", "x"),
    ]);
    let (_, printed) = client(Sdk::Python, &scene, &[], &line);
    let listed: Vec<&Value> = printed[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert!(!listed.contains(&&json!("refund_order")), "{listed:?}");
    assert!(
        printed[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("is refused rather than run unguarded")),
        "{printed:?}"
    );
    assert!(scene.refunds().is_empty());
}

/// Without sessions (`--stateless`), a run comes from what each request
/// carries; where the file refuses unscoped calls, a call naming none is
/// refused and nothing reaches the server.
pub fn a_stateless_gateway_scopes_by_what_each_request_names() {
    let config = format!("[runs]\nunscoped = \"refuse\"\n{REFUND_CONFIG}");
    let scene = Scene::new(&config);
    let metrics = free_port();
    let (_gateway, url) = http_gateway_with(
        &scene,
        &scene.store(),
        &Sdk::Python.server(),
        &[],
        &["--stateless", "--metrics", &metrics],
    );
    for (sdk, expected) in [(Sdk::TypeScript, "fresh"), (Sdk::Python, "replay")] {
        let line = args(&[
            "--url",
            &url,
            "--run",
            "stateless",
            "--call",
            &refund("3", "x"),
        ]);
        let (_, results) = client(sdk, &scene, &[], &line);
        assert_eq!(status(&results[0]), expected, "{sdk:?}: {results:?}");
    }
    let (_, unscoped) = client(
        Sdk::TypeScript,
        &scene,
        &[],
        &args(&["--url", &url, "--call", &refund("4", "x")]),
    );
    assert!(
        unscoped[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("found none for the request")),
        "{unscoped:?}"
    );
    let refunds = scene.refunds();
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    // The guard's metrics, as Prometheus reads them.
    let scraped = get(&metrics, "/metrics");
    for line in [
        "idempotent_tools_calls_total{tool=\"refund_order\",outcome=\"fresh\"} 1",
        "idempotent_tools_calls_total{tool=\"refund_order\",outcome=\"replay\"} 1",
    ] {
        assert!(scraped.contains(line), "{line} in:\n{scraped}");
    }
}

/// An address on loopback that nothing listens on.
fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    listener.local_addr().expect("its address").to_string()
}

/// The body of a plain HTTP GET.
fn get(address: &str, path: &str) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    response
}

/// An upstream that cannot be started, or that leaves before its
/// handshake: a clear message, and exit status 1.
pub fn an_upstream_that_does_not_start_fails_with_a_clear_message() {
    let scene = Scene::new(REFUND_CONFIG);
    for (upstream, says) in [
        (
            vec!["/nonexistent/refund-server"],
            "the upstream `/nonexistent/refund-server` could not be started",
        ),
        (vec!["node", "-e", "process.exit(3)"], "did not initialize"),
    ] {
        let out = Command::new(BIN)
            .args(["gateway", "--check", "--config", &scene.config(), "--"])
            .args(&upstream)
            .stdin(Stdio::null())
            .output()
            .expect("run the gateway");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{upstream:?}: {stderr}");
        assert!(stderr.contains(says), "{upstream:?}: {stderr}");
    }
}

/// Progress and cancellation pass through: a client's progress token gets
/// the server's notifications back, on a guarded tool and on another, and
/// a client's cancellation of an unguarded call reaches the server.
pub fn progress_and_cancellation_pass_through() {
    let config = format!("{REFUND_CONFIG}\n[tools.count_slowly]\nkey = \"<run>:count:<steps>\"\n");
    for http in [false, true] {
        let scene = Scene::new(&config);
        let (_upstream, _gateway, target) = if http {
            let (upstream, upstream_url) = http_server(Sdk::TypeScript, &scene, &[]);
            let (gateway, url) = http_gateway(&scene, &scene.store(), &[upstream_url], &[]);
            (Some(upstream), Some(gateway), vec!["--url".to_owned(), url])
        } else {
            let mut target = args(&["--stdio", "--"]);
            target.extend(scene.stdio_gateway(&scene.store(), Sdk::TypeScript));
            (None, None, target)
        };
        let count = json!({"name": "count_slowly", "arguments": {"steps": 3}}).to_string();
        let mut line = args(&[
            "--run",
            "r",
            "--progress",
            "--call",
            &count,
            "--call",
            &count,
        ]);
        line.extend(target.iter().cloned());
        let (_, counted) = client(Sdk::TypeScript, &scene, &[], &line);
        assert_eq!(status(&counted[0]), "fresh", "http {http}: {counted:?}");
        assert_eq!(
            counted[0]["progress"],
            json!([1, 2, 3]),
            "http {http}: {counted:?}"
        );
        // A replay does not run the tool: no progress.
        assert_eq!(status(&counted[1]), "replay", "http {http}: {counted:?}");
        assert_eq!(
            counted[1]["progress"],
            json!([]),
            "http {http}: {counted:?}"
        );

        let wait = json!({"name": "wait_for_cancel", "arguments": {"order_id": "5"}}).to_string();
        let mut line = args(&["--cancel-after-ms", "500", "--call", &wait]);
        line.extend(target.iter().cloned());
        let (_, cancelled) = client(Sdk::TypeScript, &scene, &[], &line);
        assert!(
            cancelled[0]["error"].is_string(),
            "http {http}: {cancelled:?}"
        );
        let events: Vec<Value> = scene
            .refunds()
            .into_iter()
            .map(|line| line["event"].clone())
            .collect();
        assert_eq!(
            events,
            [json!("started"), json!("cancelled")],
            "http {http}"
        );
    }
}
