//! `idempotent-tools`: an operator's view of the claims and records an
//! `idempotent-tools` store keeps, in a SQLite file, Postgres or Redis. It lists
//! them, shows one, forgets a key so that its action may run again, purges
//! expired records and counts them. It never creates a schema.

mod error;
#[cfg(feature = "gateway")]
mod gateway;
mod print;
mod target;

use std::io::{self, BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use idempotent_tools::records::{DEFAULT_PAGE, MAX_PAGE};
use idempotent_tools::{
    call::Key,
    records::{Forget, Record, RecordQuery, RecordState, Records, Resolution},
    store::{RecordValue, StoreError},
};
use serde_json::json;

use crate::error::{CliError, Exit};
use crate::target::Target;

const EXAMPLE: &str = "\
A worked example: a holder crashed mid-refund under Takeover::ReportUnknown,
and every retry now answers UnknownOutcome.

  $ export IDEMPOTENT_STORE=postgres://ops@db.internal/shop
  $ idempotent-tools pending
  TOOL                FENCE  WHEN               KEY                   WHY
  shop::refund_order  2      completed 14m ago  run-7f3a:refund:1182  its holder stopped mid-action
  $ idempotent-tools show run-7f3a:refund:1182
  (check with the payment provider whether refund 1182 went out)

If it went out, record its result, and every retry replays it:

  $ idempotent-tools resolve run-7f3a:refund:1182 --applied '{\"id\":\"re_1\"}'
  resolved `run-7f3a:refund:1182` as applied: every later call replays its result

If it did not, the next call refunds once:

  $ idempotent-tools resolve run-7f3a:refund:1182 --not-applied
  resolved `run-7f3a:refund:1182` as not applied: the next call runs the action

Exit codes:
  0  the command did what it was asked
  1  the store failed or could not be reached
  2  bad usage, or a store that is wrong: unknown URL scheme (or one this
     build has no feature for), no such file, a database without the
     idempotent-tools schema; --applied text that is not JSON
  3  no record under the key (or digest) given
  4  refused, nothing changed: a live claim without --force (any live
     claim, for resolve), an outcome resolve finds known, or the
     confirmation declined";

/// Inspect and resolve the claims and records of an idempotent-tools store.
#[derive(Debug, Parser)]
#[command(name = "idempotent-tools", version, after_long_help = EXAMPLE)]
struct Cli {
    /// The store: a SQLite file path (or sqlite://PATH), a postgres:// URL
    /// whose `schema` parameter names the store's schema
    /// (postgres://HOST/DB?schema=shop_idempotent; the search_path's without
    /// it), a redis:// URL whose `prefix` parameter is the store's prefix
    /// (redis://HOST/DB?prefix=shop:idempotent:; `idempotent:` without it),
    /// or a Redis Cluster by some of its nodes
    /// (redis+cluster://HOST:PORT,HOST:PORT?prefix=shop:idempotent:).
    #[arg(
        long,
        short,
        global = true,
        env = "IDEMPOTENT_STORE",
        value_name = "PATH|URL"
    )]
    store: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List records, filtered, one page at a time, in the order of their keys.
    List(ListArgs),
    /// Show one record in full.
    Show(ShowArgs),
    /// Remove a key's record, so the next call under it runs the action.
    Forget(ForgetArgs),
    /// List the keys whose outcome is unknown, with why and the last error.
    Pending(PendingArgs),
    /// Resolve a key whose outcome is unknown, once the provider has said
    /// what happened: as applied with its result, or as not applied.
    Resolve(ResolveArgs),
    /// Remove completed records whose retention has passed.
    Purge(JsonArg),
    /// Count records by tool and state.
    Stats(JsonArg),
    /// Serve an MCP server's tools to MCP clients, guarding the tools a
    /// configuration file names: one action per key, whichever client asks.
    #[cfg(feature = "gateway")]
    Gateway(gateway::GatewayArgs),
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Only records in this state.
    #[arg(long, value_enum)]
    state: Option<StateArg>,
    /// Only records of this tool, by its full id (such as shop::refund_order).
    #[arg(long)]
    tool: Option<String>,
    /// Only records of this run: keys whose text up to the first `:` is
    /// it (`--run run-7` never lists `run-70:...`).
    #[arg(long)]
    run: Option<String>,
    /// Only records whose key begins with this text: a search by the start
    /// of a key (`--key-prefix run-7` lists `run-7:...` and `run-70:...`).
    #[arg(long, value_name = "TEXT")]
    key_prefix: Option<String>,
    /// Only records that last changed longer ago than this (90s, 15m, 2h, 7d).
    #[arg(long, value_name = "AGE", value_parser = print::parse_age)]
    older_than: Option<Duration>,
    #[command(flatten)]
    paging: Paging,
    /// Print JSON for scripts: {"records": [...], "next": KEY or null}.
    #[arg(long)]
    json: bool,
}

/// Which page of a listing: `list`'s and `pending`'s.
#[derive(Debug, Args)]
struct Paging {
    /// At most this many records per page (1 to 1000).
    #[arg(long, default_value_t = DEFAULT_PAGE, value_parser = parse_limit)]
    limit: usize,
    /// Start after this key: the `next` of the previous page.
    #[arg(long, value_name = "KEY")]
    after: Option<String>,
    /// Every page, not only the first.
    #[arg(long, conflicts_with = "after")]
    all: bool,
}

impl Paging {
    /// `query` limited to the page, from where it starts.
    fn page(&self, query: RecordQuery) -> RecordQuery {
        let query = query.limit(self.limit);
        match &self.after {
            Some(after) => query.after(after.clone()),
            None => query,
        }
    }
}

#[derive(Debug, Args)]
struct ShowArgs {
    /// The key, in full, as `list` prints it.
    #[arg(required_unless_present = "digest", conflicts_with = "digest")]
    key: Option<String>,
    /// Find the record by the hex digest traces print instead of the key.
    #[arg(long, value_name = "HEX")]
    digest: Option<String>,
    /// Print JSON for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ForgetArgs {
    /// The key, in full, as `list` prints it.
    key: String,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    /// Remove a claim whose lease is live too: only if its holder is known
    /// to be gone, since a retry may then run the action alongside it.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct PendingArgs {
    /// Only keys of this tool, by its full id (such as shop::refund_order).
    #[arg(long)]
    tool: Option<String>,
    /// Only keys of this run: keys whose text up to the first `:` is it.
    #[arg(long)]
    run: Option<String>,
    #[command(flatten)]
    paging: Paging,
    /// Print JSON for scripts: {"records": [...], "next": KEY or null}, each
    /// record with its `why` and `error`.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("resolution").required(true).args(["applied", "not_applied"])))]
struct ResolveArgs {
    /// The key, in full, as `pending` prints it.
    key: String,
    /// The action happened: record this JSON as its result (what the tool
    /// would have returned), which every later call replays.
    #[arg(long, value_name = "JSON")]
    applied: Option<String>,
    /// The action did not happen: remove the record, so the next call acts.
    #[arg(long)]
    not_applied: bool,
}

#[derive(Debug, Args)]
struct JsonArg {
    /// Print JSON for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StateArg {
    /// A claim is held: its action runs, or its holder stopped.
    Held,
    /// The action returned its result, which repeats replay.
    Done,
    /// The action's error was recorded as final.
    Failed,
    /// The outcome is unknown: an operator must check and forget or leave it.
    Unknown,
}

impl From<StateArg> for RecordState {
    fn from(state: StateArg) -> RecordState {
        match state {
            StateArg::Held => RecordState::Held,
            StateArg::Done => RecordState::Done,
            StateArg::Failed => RecordState::Failed,
            StateArg::Unknown => RecordState::Unknown,
        }
    }
}

fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        _ => Err(format!("`{text}` is not a page size: give 1 to {MAX_PAGE}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "gateway")]
    if let Command::Gateway(args) = cli.command {
        return run_gateway(args, cli.store);
    }
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => Exit::Ok.into(),
        Err(err) => {
            err.report();
            err.exit().into()
        }
    }
}

/// A runtime of one thread, or the exit status of a tool that could not
/// start one.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: could not start the async runtime: {e}");
            Exit::Failed.into()
        })
}

/// The gateway, on a runtime of one thread, with its log on stderr
/// (`RUST_LOG`; the guard's `info` and everything's `warn` by default).
#[cfg(feature = "gateway")]
fn run_gateway(args: gateway::GatewayArgs, store: Option<String>) -> ExitCode {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,idempotent_tools=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .init();
    // One thread: rmcp hands each notification from the upstream to a task
    // of its own, and only a runtime of one thread runs those tasks in the
    // order they came in, so that a client's progress arrives in order and
    // before its result. The gateway's time goes to rmcp's work on each
    // message, which a second thread does not shorten (BENCHMARKS.md,
    // section 12).
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    match runtime.block_on(gateway::run(args, store)) {
        Ok(()) => Exit::Ok.into(),
        Err(err) => {
            eprintln!("error: {err}");
            err.exit().into()
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let target = Target::parse(cli.store.as_deref().unwrap_or_default())?;
    let by_expiry = matches!(target, Target::Redis { .. } | Target::RedisCluster { .. });
    let store = target.open().await?;
    let out = &mut io::stdout().lock();
    match cli.command {
        Command::List(args) => list(&*store, args, out).await,
        Command::Show(args) => show(&*store, args, out).await,
        Command::Forget(args) => forget(&*store, args, out).await,
        Command::Pending(args) => pending(&*store, args, out).await,
        Command::Resolve(args) => resolve(&*store, args, out).await,
        Command::Purge(JsonArg { json }) => {
            let purged = store.purge_expired().await.map_err(failed("purge"))?;
            if json {
                write(out, &json!({ "purged": purged }).to_string())
            } else if by_expiry {
                write(
                    out,
                    "purged 0 expired records: Redis removes each record itself when its \
                     retention runs out, so there is never anything to purge",
                )
            } else {
                write(out, &format!("purged {purged} expired records"))
            }
        }
        Command::Stats(JsonArg { json }) => {
            let counts = store.count().await.map_err(failed("count records"))?;
            if json {
                write(out, &print::counts_json(&counts).to_string())
            } else {
                write(out, print::count_table(&counts).trim_end())
            }
        }
        #[cfg(feature = "gateway")]
        Command::Gateway(_) => unreachable!("the gateway is run before the store is opened"),
    }
}

fn failed(doing: &'static str) -> impl Fn(StoreError) -> CliError {
    move |source| CliError::Store { doing, source }
}

fn write(out: &mut impl Write, text: &str) -> Result<(), CliError> {
    writeln!(out, "{text}").map_err(CliError::Output)
}

async fn list(store: &dyn Records, args: ListArgs, out: &mut impl Write) -> Result<(), CliError> {
    let mut query = RecordQuery::new();
    if let Some(state) = args.state {
        query = query.state(state.into());
    }
    if let Some(tool) = args.tool {
        query = query.tool(tool);
    }
    if let Some(run) = args.run {
        query = query.run(run);
    }
    if let Some(prefix) = args.key_prefix {
        query = query.key_prefix(prefix);
    }
    if let Some(age) = args.older_than {
        query = query.older_than(age);
    }
    let (records, next) = pages(store, args.paging.page(query), args.paging.all).await?;
    let listing = Listing {
        json: print::record_json,
        table: print::table,
        none: "no records match",
        more: "records",
    };
    listing.print(&records, next, args.json, out)?;
    Ok(())
}

/// How a listing prints: as JSON, or as a table.
struct Listing {
    json: fn(&Record) -> serde_json::Value,
    table: fn(&[Record], SystemTime) -> String,
    /// What is said when nothing matched.
    none: &'static str,
    /// What the records are called, when more follow.
    more: &'static str,
}

impl Listing {
    /// Prints `records` and where the next page starts; whether it printed
    /// a table of any.
    fn print(
        &self,
        records: &[Record],
        next: Option<String>,
        as_json: bool,
        out: &mut impl Write,
    ) -> Result<bool, CliError> {
        if as_json {
            let records: Vec<_> = records.iter().map(self.json).collect();
            write(
                out,
                &json!({ "records": records, "next": next }).to_string(),
            )?;
            return Ok(false);
        }
        if records.is_empty() {
            eprintln!("{}", self.none);
            return Ok(false);
        }
        write(out, (self.table)(records, SystemTime::now()).trim_end())?;
        if let Some(next) = next {
            eprintln!(
                "note: more {} follow; add `--after '{next}'` for the next page, or `--all`",
                self.more
            );
        }
        Ok(true)
    }
}

/// The records of one page, or of every page from it on with `all`, and
/// where the next page starts.
async fn pages(
    store: &dyn Records,
    mut query: RecordQuery,
    all: bool,
) -> Result<(Vec<Record>, Option<String>), CliError> {
    let mut records = Vec::new();
    loop {
        let page = store.list(&query).await.map_err(failed("list records"))?;
        records.extend(page.records);
        match page.next {
            Some(next) if all => query = query.after(next),
            next => return Ok((records, next)),
        }
    }
}

async fn pending(
    store: &dyn Records,
    args: PendingArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let mut query = RecordQuery::pending();
    if let Some(tool) = args.tool {
        query = query.tool(tool);
    }
    if let Some(run) = args.run {
        query = query.run(run);
    }
    let (records, next) = pages(store, args.paging.page(query), args.paging.all).await?;
    let listing = Listing {
        json: print::pending_json,
        table: print::pending_table,
        none: "no outcome is unknown",
        more: "keys",
    };
    if listing.print(&records, next, args.json, out)? {
        eprintln!(
            "note: ask the provider whether each action happened, then \
             `idempotent-tools resolve KEY --applied JSON` or `--not-applied`"
        );
    }
    Ok(())
}

async fn resolve(
    store: &dyn Records,
    args: ResolveArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let key = Key::parse(&args.key).map_err(CliError::BadKey)?;
    // Refused before anything is written.
    let how = match &args.applied {
        Some(text) => {
            serde_json::from_str::<serde_json::Value>(text).map_err(CliError::BadJson)?;
            Resolution::Applied(RecordValue::from_json(text.trim()))
        }
        None => Resolution::NotApplied,
    };
    match store.resolve(&key, how).await {
        Ok(()) if args.applied.is_some() => write(
            out,
            &format!(
                "resolved `{}` as applied: every later call replays its result",
                args.key
            ),
        ),
        Ok(()) => write(
            out,
            &format!(
                "resolved `{}` as not applied: the next call runs the action",
                args.key
            ),
        ),
        Err(StoreError::NoRecord { .. }) => Err(CliError::NotFound(args.key)),
        Err(refused @ (StoreError::LiveClaim { .. } | StoreError::NotUnknown { .. })) => {
            Err(CliError::Unresolved(refused))
        }
        Err(source) => Err(failed("resolve the key")(source)),
    }
}

async fn show(store: &dyn Records, args: ShowArgs, out: &mut impl Write) -> Result<(), CliError> {
    let record = match (args.key, args.digest) {
        (_, Some(prefix)) => by_digest(store, &prefix).await?,
        // Clap asks for a key when no digest is given.
        (key, None) => {
            let key = key.unwrap_or_default();
            store
                .inspect(&Key::parse(&key).map_err(CliError::BadKey)?)
                .await
                .map_err(failed("read the record"))?
                .ok_or(CliError::NotFound(key))?
        }
    };
    if args.json {
        return write(out, &print::record_json(&record).to_string());
    }
    write(out, print::fields(&record, SystemTime::now()).trim_end())?;
    if record.state == RecordState::Unknown {
        eprintln!(
            "note: check with the provider whether the action happened, then \
             `idempotent-tools resolve '{}' --applied JSON` with its result, or `--not-applied` \
             to let the next call run it",
            record.key
        );
    }
    Ok(())
}

/// The one record whose key's digest begins with `prefix`.
async fn by_digest(store: &dyn Records, prefix: &str) -> Result<Record, CliError> {
    let hex = prefix.trim().to_ascii_lowercase();
    if hex.is_empty() || hex.len() > 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(CliError::BadDigest(prefix.to_owned()));
    }
    let mut query = RecordQuery::new().limit(MAX_PAGE);
    let mut found = Vec::new();
    loop {
        let page = store.list(&query).await.map_err(failed("list records"))?;
        found.extend(
            page.records
                .into_iter()
                .filter(|r| r.key_digest().starts_with(&hex)),
        );
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
    }
    match found.len() {
        0 => Err(CliError::DigestNotFound(hex)),
        1 => Ok(found.remove(0)),
        count => Err(CliError::AmbiguousDigest { prefix: hex, count }),
    }
}

async fn forget(
    store: &dyn Records,
    args: ForgetArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let key = Key::parse(&args.key).map_err(CliError::BadKey)?;
    let record = store
        .inspect(&key)
        .await
        .map_err(failed("read the record"))?
        .ok_or_else(|| CliError::NotFound(args.key.clone()))?;
    if record.lease_is_live(SystemTime::now()) && !args.force {
        return Err(CliError::LiveClaim { key: args.key });
    }
    if !args.yes {
        confirm(&record)?;
    }
    let how = if args.force {
        Forget::Force
    } else {
        Forget::UnlessLive
    };
    match store.forget_with(&key, how).await {
        Ok(true) => write(out, &format!("forgot `{}`", args.key)),
        Ok(false) => Err(CliError::NotFound(args.key)),
        Err(StoreError::LiveClaim { .. }) => Err(CliError::LiveClaim { key: args.key }),
        Err(source) => Err(failed("forget the key")(source)),
    }
}

/// Asks on the terminal; anything but yes declines.
fn confirm(record: &Record) -> Result<(), CliError> {
    let stdin = io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::NoTerminal);
    }
    eprint!(
        "Forget `{}` ({}, {})? A retry will run the action again. [y/N] ",
        record.key, record.state, record.tool
    );
    let _ = io::stderr().flush();
    let mut answer = String::new();
    // An answer that cannot be read declines.
    let _ = stdin.lock().read_line(&mut answer);
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::Declined(record.key.to_string())),
    }
}
