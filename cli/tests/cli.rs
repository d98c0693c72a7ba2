//! The built `idempotent-tools` binary, end to end, against a real SQLite
//! file and the real Postgres: every command, its JSON, its exit codes, and
//! bad input (an unknown URL scheme, a database without the schema, a key
//! that does not exist).
//!
//! Postgres cases need `IDEMPOTENT_POSTGRES_URL`: without it they are
//! reported as ignored, never as passed, and in CI they fail. Each gets a
//! schema of its own, named in the URL's `search_path`, dropped afterwards.

// The workspace's harness for cases that need a server.
#[path = "../../tests/harness/mod.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use idempotent_tools::store::postgres::tokio_postgres::{self, NoTls};
use idempotent_tools::store::{PostgresStore, SqliteStore};
use idempotent_tools::{
    ClaimAnswer, ClaimRequest, Ending, Fingerprint, Finished, Key, Recorded, Store, ToolId,
};
use serde_json::Value;

const URL: &str = "IDEMPOTENT_POSTGRES_URL";
const BIN: &str = env!("CARGO_BIN_EXE_idempotent-tools");

static REFUND: ToolId = ToolId::new("shop::refund_order");
static CANCEL: ToolId = ToolId::new("shop::cancel_order");

/// What a run of the binary left.
#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {self:?}"))
    }

    fn expect(self, code: i32) -> Ran {
        assert_eq!(self.code, code, "exit code: {self:?}");
        self
    }
}

/// Runs the binary against `store`, with no terminal on stdin.
fn cli(store: &str, args: &[&str]) -> Ran {
    let out = Command::new(BIN)
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("IDEMPOTENT_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary");
    Ran {
        code: out.status.code().expect("an exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn fresh_run() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "run-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn key(run: &str, name: &str) -> Key {
    Key::parse(&format!("{run}:refund:{name}")).expect("a key as a template renders it")
}

async fn claim(store: &dyn Store, key: &Key, tool: &ToolId, lease: Duration, keep: Duration) {
    let req = ClaimRequest {
        key,
        tool,
        fingerprint: Fingerprint::builder()
            .arg("usd", &42)
            .expect("fingerprint")
            .finish(),
        lease,
        retention: keep,
    };
    let state = store.claim(req).await.expect("claim");
    let ClaimAnswer::Claimed(claim) = state else {
        panic!("expected a fresh claim, got {state:?}");
    };
    let _ = claim;
}

async fn finish(store: &dyn Store, key: &Key, tool: &ToolId, ending: Ending, at: SystemTime) {
    finish_keeping(store, key, tool, ending, at, Duration::from_secs(3600)).await;
}

async fn finish_keeping(
    store: &dyn Store,
    key: &Key,
    tool: &ToolId,
    ending: Ending,
    at: SystemTime,
    keep: Duration,
) {
    let req = ClaimRequest {
        key,
        tool,
        fingerprint: Fingerprint::builder()
            .arg("usd", &42)
            .expect("fingerprint")
            .finish(),
        lease: Duration::from_secs(30),
        retention: keep,
    };
    let ClaimAnswer::Claimed(claim) = store.claim(req).await.expect("claim") else {
        panic!("expected a fresh claim");
    };
    let json = match ending {
        Ending::Ok => r#"{"id":"re_1"}"#,
        Ending::Err => r#""card declined""#,
        _ => "null",
    };
    let finished = Finished {
        ending,
        value: Recorded::from_json(json),
        finished_at: at,
    };
    store.complete(&claim, finished).await.expect("complete");
}

/// Under a fresh run: a live claim (`a-held`), a crashed holder's claim
/// (`b-crashed`, lease already over), a result (`c-done`), an unknown
/// outcome (`d-unknown`), a recorded error of the other tool (`e-error`),
/// and a result finished two hours ago (`f-old`).
async fn one_of_each(store: &dyn Store) -> String {
    let run = fresh_run();
    let hour = Duration::from_secs(3600);
    let now = SystemTime::now();
    claim(
        store,
        &key(&run, "a-held"),
        &REFUND,
        Duration::from_secs(300),
        hour,
    )
    .await;
    claim(
        store,
        &key(&run, "b-crashed"),
        &REFUND,
        Duration::ZERO,
        hour,
    )
    .await;
    finish(store, &key(&run, "c-done"), &REFUND, Ending::Ok, now).await;
    finish(
        store,
        &key(&run, "d-unknown"),
        &REFUND,
        Ending::Unknown,
        now,
    )
    .await;
    finish(store, &key(&run, "e-error"), &CANCEL, Ending::Err, now).await;
    let two_hours_ago = now - 2 * hour;
    finish(
        store,
        &key(&run, "f-old"),
        &REFUND,
        Ending::Ok,
        two_hours_ago,
    )
    .await;
    run
}

fn keys(listed: &Value) -> Vec<String> {
    listed["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            let key = r["key"].as_str().expect("key");
            key.rsplit(':').next().expect("name").to_owned()
        })
        .collect()
}

/// A SQLite file holding the schema, in a directory removed afterwards.
fn sqlite_file() -> (tempfile::TempDir, PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("claims.db");
    let store = SqliteStore::open(&path).expect("open");
    (dir, path, store)
}

fn text(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_owned()
}

// ---------------------------------------------------------------- every store

/// Every command on a store holding [`one_of_each`], named by `target`.
async fn every_command(store: &dyn Store, target: &str) {
    let run = one_of_each(store).await;
    let run_args = ["--run", run.as_str()];
    let list = |extra: &[&str]| {
        let mut args = vec!["list", "--json"];
        args.extend(run_args);
        args.extend(extra);
        cli(target, &args).expect(0).json()
    };

    // Filters.
    let all = list(&[]);
    assert_eq!(
        keys(&all),
        [
            "a-held",
            "b-crashed",
            "c-done",
            "d-unknown",
            "e-error",
            "f-old"
        ]
    );
    assert_eq!(all["next"], Value::Null);
    assert_eq!(keys(&list(&["--state", "unknown"])), ["d-unknown"]);
    assert_eq!(keys(&list(&["--state", "held"])), ["a-held", "b-crashed"]);
    assert_eq!(keys(&list(&["--state", "error"])), ["e-error"]);
    assert_eq!(keys(&list(&["--tool", "shop::cancel_order"])), ["e-error"]);
    assert_eq!(keys(&list(&["--older-than", "1h"])), ["f-old"]);
    let unknown = &list(&["--state", "unknown"])["records"][0];
    assert_eq!(unknown["tool"], "shop::refund_order");
    assert_eq!(unknown["result"], Value::Null);
    assert_eq!(unknown["state"], "unknown");

    // Paging: a page of two, then the rest after it, or every page at once.
    let first = list(&["--limit", "2"]);
    assert_eq!(keys(&first), ["a-held", "b-crashed"]);
    let next = first["next"].as_str().expect("a next page").to_owned();
    assert_eq!(
        keys(&list(&["--limit", "4", "--after", &next])),
        ["c-done", "d-unknown", "e-error", "f-old"]
    );
    assert_eq!(keys(&list(&["--limit", "1", "--all"])).len(), 6);

    // The table for people, and the hint to the next page.
    let table = cli(target, &["list", "--run", &run, "--limit", "2"]).expect(0);
    let mut lines = table.stdout.lines();
    let header = lines.next().expect("a header");
    assert!(
        header.starts_with("STATE") && header.ends_with("KEY"),
        "{header}"
    );
    assert_eq!(lines.count(), 2, "{}", table.stdout);
    assert!(table.stderr.contains("--after"), "{}", table.stderr);

    // One record in full, by key and by the digest traces print.
    let unknown_key = key(&run, "d-unknown");
    let shown = cli(target, &["show", unknown_key.as_str()]).expect(0);
    assert!(
        shown.stdout.contains("state        unknown"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stderr.contains("check with the provider"),
        "{}",
        shown.stderr
    );
    let done = cli(target, &["show", "--json", key(&run, "c-done").as_str()])
        .expect(0)
        .json();
    assert_eq!(done["result"]["id"], "re_1");
    assert_eq!(done["fence"], 1);
    let digest = done["key_digest"].as_str().expect("digest")[..16].to_owned();
    let by_digest = cli(target, &["show", "--json", "--digest", &digest])
        .expect(0)
        .json();
    assert_eq!(by_digest["key"], done["key"]);

    // Forget: a live claim is refused (4) unless forced; no terminal and
    // no --yes is bad usage (2); each leaves the record.
    let held = key(&run, "a-held");
    let refused = cli(target, &["forget", "--yes", held.as_str()]).expect(4);
    assert!(
        refused.stderr.contains("lease is live"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    let unasked = cli(target, &["forget", unknown_key.as_str()]).expect(2);
    assert!(unasked.stderr.contains("--yes"), "{}", unasked.stderr);
    cli(target, &["show", unknown_key.as_str()]).expect(0);

    // The crashed holder's claim and the unknown outcome go with --yes; the
    // live claim with --force.
    for name in ["b-crashed", "d-unknown"] {
        let forgotten = cli(target, &["forget", "--yes", key(&run, name).as_str()]).expect(0);
        assert!(forgotten.stdout.starts_with("forgot"), "{forgotten:?}");
    }
    cli(target, &["forget", "--yes", "--force", held.as_str()]).expect(0);
    assert_eq!(keys(&list(&[])), ["c-done", "e-error", "f-old"]);
    let gone = cli(target, &["show", unknown_key.as_str()]).expect(3);
    assert!(
        gone.stderr.contains("no record under key"),
        "{}",
        gone.stderr
    );
    assert!(gone.stderr.contains("help: "), "{}", gone.stderr);
    cli(target, &["forget", "--yes", unknown_key.as_str()]).expect(3);
    cli(target, &["show", "--digest", "ffffffffffffffffffff"]).expect(3);
    cli(target, &["show", "--digest", "not-hex"]).expect(2);
}

/// Stats and purge on a store of its own (they see every record).
async fn stats_and_purge(store: &dyn Store, target: &str) {
    let run = fresh_run();
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    claim(
        store,
        &key(&run, "held"),
        &REFUND,
        Duration::from_secs(300),
        hour,
    )
    .await;
    finish(store, &key(&run, "done-1"), &REFUND, Ending::Ok, now).await;
    finish(store, &key(&run, "done-2"), &REFUND, Ending::Ok, now).await;
    finish(store, &key(&run, "error"), &CANCEL, Ending::Err, now).await;
    let expired = key(&run, "expired");
    finish_keeping(store, &expired, &CANCEL, Ending::Ok, now, Duration::ZERO).await;

    let stats = cli(target, &["stats", "--json"]).expect(0).json();
    assert_eq!(stats["total"], 5);
    assert_eq!(stats["by_state"]["held"], 1);
    assert_eq!(stats["by_state"]["done"], 3);
    assert_eq!(stats["by_state"]["error"], 1);
    assert_eq!(stats["by_state"]["unknown"], 0);
    let counts = stats["counts"].as_array().expect("counts");
    assert!(
        counts
            .iter()
            .any(|c| c["tool"] == "shop::refund_order" && c["state"] == "done" && c["count"] == 2)
    );
    let table = cli(target, &["stats"]).expect(0);
    assert!(
        table
            .stdout
            .contains("5 records: 1 held, 3 done, 0 unknown, 1 error"),
        "{}",
        table.stdout
    );

    // The record kept for no time goes; nothing else does.
    let purged = cli(target, &["purge", "--json"]).expect(0).json();
    assert_eq!(purged["purged"], 1);
    cli(target, &["show", expired.as_str()]).expect(3);
    assert_eq!(
        cli(target, &["stats", "--json"]).expect(0).json()["total"],
        4
    );
    let again = cli(target, &["purge"]).expect(0);
    assert_eq!(again.stdout.trim(), "purged 0 expired records");
}

// --------------------------------------------------------------------- SQLite

async fn every_command_on_a_sqlite_file() {
    let (_dir, path, store) = sqlite_file();
    every_command(&store, &text(&path)).await;
}

async fn stats_and_purge_on_a_sqlite_file() {
    let (_dir, path, store) = sqlite_file();
    stats_and_purge(&store, &format!("sqlite://{}", text(&path))).await;
}

async fn help_shows_the_worked_example_and_the_exit_codes() {
    let out = Command::new(BIN).arg("--help").output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for needed in [
        "list --state unknown",
        "forget run-7f3a:refund:1182",
        "Exit codes",
        "3  no record under the key",
        "IDEMPOTENT_STORE",
    ] {
        assert!(help.contains(needed), "`{needed}` in:\n{help}");
    }
}

async fn an_unknown_url_scheme_is_bad_usage() {
    let out = cli("mysql://db.internal/shop", &["list"]).expect(2);
    assert!(
        out.stderr.contains("unknown store URL scheme `mysql://`"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("postgres:// URL"), "{}", out.stderr);
}

async fn a_file_that_does_not_exist_is_bad_usage_and_is_not_created() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("typo.db");
    let out = cli(&text(&path), &["stats"]).expect(2);
    assert!(
        out.stderr.contains("there is no SQLite file"),
        "{}",
        out.stderr
    );
    assert!(!path.exists(), "the tool created {path:?}");
}

async fn a_database_without_the_schema_is_bad_usage_and_gets_none() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("other.db");
    // An empty file is an empty SQLite database.
    std::fs::write(&path, b"").expect("an empty database file");
    let out = cli(&text(&path), &["list"]).expect(2);
    assert!(
        out.stderr.contains("holds no idempotent-tools schema"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("never does"), "{}", out.stderr);
    // Still nothing there: opening it with create(false) again fails too.
    assert!(
        matches!(
            SqliteStore::builder(&path).create(false).open(),
            Err(idempotent_tools::StoreError::MissingSchema)
        ),
        "the tool created a schema"
    );
}

async fn a_file_that_is_not_a_database_fails_and_says_why() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        "not a database, just text long enough to have a header",
    )
    .expect("write");
    let out = cli(&text(&path), &["list"]).expect(1);
    assert!(
        out.stderr.starts_with("error: could not open the store"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("caused by: "), "{}", out.stderr);
}

async fn bad_arguments_are_bad_usage() {
    let (_dir, path, _store) = sqlite_file();
    let target = text(&path);
    let age = cli(&target, &["list", "--older-than", "3 hours"]).expect(2);
    assert!(age.stderr.contains("is not an age"), "{}", age.stderr);
    cli(&target, &["list", "--state", "stuck"]).expect(2);
    cli(&target, &["list", "--limit", "0"]).expect(2);
    let none = cli("", &["list"]).expect(2);
    assert!(none.stderr.contains("no store given"), "{}", none.stderr);
}

async fn text_that_is_no_key_is_bad_usage_and_says_why() {
    let (_dir, path, _store) = sqlite_file();
    let target = text(&path);
    for args in [
        ["show", "run-1:refund:<order_id>"],
        ["forget", "run-1:refund:50%"],
    ] {
        let out = cli(&target, &args).expect(2);
        assert!(
            out.stderr.contains("is not a key that a template renders"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("help: give the key in full"),
            "{}",
            out.stderr
        );
        // The reason is printed once, not again as a cause.
        assert!(!out.stderr.contains("caused by"), "{}", out.stderr);
    }
}

// ------------------------------------------------------------------- Postgres

/// A schema of its own on the server, dropped when this is, and a URL whose
/// `search_path` names it.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    async fn new() -> Schema {
        let url = std::env::var(URL).expect("the harness runs this only with the URL");
        let name = format!("idempotent_cli_{}", fresh_run().replace('-', "_"));
        admin(&url)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a schema");
        Schema { url, name }
    }

    fn url(&self) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.url, self.name)
    }

    async fn store(&self) -> PostgresStore {
        let store = PostgresStore::builder(&self.url())
            .connect_lazy()
            .expect("a store");
        store.migrate().await.expect("migrate");
        store
    }

    async fn tables(&self) -> i64 {
        admin(&self.url)
            .await
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
                &[&self.name],
            )
            .await
            .expect("count tables")
            .get(0)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let _ = admin(&url)
                    .await
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await;
            });
        });
        let _ = dropped.join();
    }
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("Postgres at {URL} must be reachable: {e}"));
    tokio::spawn(connection);
    client
}

async fn every_command_on_postgres() {
    let schema = Schema::new().await;
    let store = schema.store().await;
    every_command(&store, &schema.url()).await;
}

async fn stats_and_purge_on_postgres() {
    let schema = Schema::new().await;
    let store = schema.store().await;
    stats_and_purge(&store, &schema.url()).await;
}

async fn a_postgres_database_without_the_schema_is_bad_usage_and_gets_none() {
    let schema = Schema::new().await;
    let out = cli(&schema.url(), &["list"]).expect(2);
    assert!(
        out.stderr.contains("holds no idempotent-tools schema"),
        "{}",
        out.stderr
    );
    assert_eq!(schema.tables().await, 0, "the tool created tables");
}

async fn a_postgres_schema_newer_than_the_tool_is_refused() {
    let schema = Schema::new().await;
    drop(schema.store().await);
    admin(&schema.url())
        .await
        .batch_execute("INSERT INTO idempotent_schema (version) VALUES (99)")
        .await
        .expect("a newer version");
    let out = cli(&schema.url(), &["stats"]).expect(1);
    assert!(out.stderr.contains("version 99"), "{}", out.stderr);
    assert!(
        out.stderr.contains("cargo install idempotent-tools-cli"),
        "{}",
        out.stderr
    );
}

async fn a_key_that_does_not_exist_on_postgres_is_not_found() {
    let schema = Schema::new().await;
    drop(schema.store().await);
    let out = cli(&schema.url(), &["show", "no-such-run:refund:1"]).expect(3);
    assert!(
        out.stderr
            .contains("no record under key `no-such-run:refund:1`"),
        "{}",
        out.stderr
    );
    cli(&schema.url(), &["forget", "--yes", "no-such-run:refund:1"]).expect(3);
}

async fn an_unreachable_server_fails_and_says_what_to_check() {
    let out = cli("postgres://postgres@127.0.0.1:1/test", &["list"]).expect(1);
    assert!(
        out.stderr
            .contains("could not open the store at `postgres://"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("help: check that the database is up"),
        "{}",
        out.stderr
    );
}

async fn a_password_in_the_url_never_reaches_a_message() {
    let out = cli("postgres://app:s3cret@127.0.0.1:1/test", &["list"]).expect(1);
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
}

fn main() {
    let mut trials = trials!(always;
        every_command_on_a_sqlite_file,
        stats_and_purge_on_a_sqlite_file,
        help_shows_the_worked_example_and_the_exit_codes,
        an_unknown_url_scheme_is_bad_usage,
        a_file_that_does_not_exist_is_bad_usage_and_is_not_created,
        a_database_without_the_schema_is_bad_usage_and_gets_none,
        a_file_that_is_not_a_database_fails_and_says_why,
        bad_arguments_are_bad_usage,
        text_that_is_no_key_is_bad_usage_and_says_why,
        an_unreachable_server_fails_and_says_what_to_check,
        a_password_in_the_url_never_reaches_a_message,
    );
    trials.extend(trials!(URL;
        every_command_on_postgres,
        stats_and_purge_on_postgres,
        a_postgres_database_without_the_schema_is_bad_usage_and_gets_none,
        a_postgres_schema_newer_than_the_tool_is_refused,
        a_key_that_does_not_exist_on_postgres_is_not_found,
    ));
    harness::main(trials);
}
