//! `idempotent-tools gateway`: an MCP server that stands in front of
//! another, in any language, and guards the tools its configuration names
//! with the same claim-first guard as `#[idempotent]`.
//!
//! - `config`: the TOML file;
//! - `template`: key templates over JSON arguments, checked against the
//!   upstream's input schemas;
//! - `tools`: the guarded tools, as the last check left them;
//! - `upstream`: the server behind, and the key passed to it;
//! - `hub`: what the client sessions share (progress, notifications);
//! - `proxy`: the gateway as its clients' server;
//! - `serve`: stdio, or streamable HTTP behind the principal check.

mod config;
mod hub;
mod proxy;
mod serve;
mod template;
mod tools;
mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use idempotent_tools::MemoryStore;
use idempotent_tools::rmcp::{RunPolicy, RunSource};
use idempotent_tools::store::Store;

use self::config::{Config, ConfigError, RunSourceName, UnscopedName};
use self::hub::Hub;
use self::proxy::Gateway;
use self::upstream::UpstreamAddress;
use crate::error::Exit;
use crate::target::Target;

/// The target of the gateway's own events.
pub const TARGET: &str = "idempotent_tools::gateway";

/// `idempotent-tools gateway`.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// The configuration file (TOML): the guarded tools, their key
    /// templates and policies, the upstream, the store and [auth].
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Serve streamable HTTP at this address (at /mcp) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Over HTTP, keep no sessions: each request is served alone.
    #[arg(long, requires = "listen")]
    stateless: bool,
    /// A host name (or host:port) the HTTP side answers to, beyond
    /// loopback's; repeat for more.
    #[arg(long = "allow-host", value_name = "HOST", requires = "listen")]
    allow_hosts: Vec<String>,
    /// The upstream's streamable HTTP URL, instead of the file's [upstream].
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    upstream_url: Option<String>,
    /// Serve the guard's metrics (calls by tool and outcome, waits,
    /// takeovers, store steps) for Prometheus at this address.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Check the configuration against the upstream's schemas, then exit.
    #[arg(long)]
    check: bool,
    /// The upstream's command, after `--`, instead of the file's [upstream].
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Why the gateway stopped, or never started.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The file is missing or malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The file and the upstream's schemas disagree: one message each.
    #[error("the configuration is refused:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Refused(Vec<String>),
    /// No upstream, or two.
    #[error("{0}")]
    Usage(String),
    /// `[auth]` is wrong, or missing where it is needed.
    #[error("{0}")]
    Auth(String),
    /// The store could not be opened.
    #[error("the store {store} could not be opened: {why}")]
    Store {
        /// Which.
        store: String,
        /// Why.
        why: String,
    },
    /// The upstream could not be started or reached.
    #[error("the upstream {upstream} {why}")]
    Upstream {
        /// Which.
        upstream: String,
        /// Why.
        why: String,
    },
    /// Serving the clients failed.
    #[error("{0}")]
    Serve(String),
}

impl GatewayError {
    /// The exit code: 2 for what the operator must fix in the file or the
    /// command line, 1 for what failed around it.
    pub fn exit(&self) -> Exit {
        match self {
            GatewayError::Config(_)
            | GatewayError::Refused(_)
            | GatewayError::Usage(_)
            | GatewayError::Auth(_) => Exit::Usage,
            GatewayError::Store { .. } | GatewayError::Upstream { .. } | GatewayError::Serve(_) => {
                Exit::Failed
            }
        }
    }
}

/// Runs the gateway until its client leaves (stdio) or the process ends
/// (HTTP). `store` is the command line's `--store`, which wins over the
/// file's.
pub async fn run(args: GatewayArgs, store: Option<String>) -> Result<(), GatewayError> {
    let config = Config::read(&args.config)?;
    let address = upstream_address(&args, &config)?;
    let principals = serve::Principals::from_config(&config.auth)?;
    if let Some(listen) = args.listen {
        principals.check_listen(listen)?;
    }
    let runs = run_policy(&config);
    let hub = Arc::new(Hub::new(config.tools));
    let upstream = upstream::connect(&address, hub.clone())
        .await
        .map_err(|why| GatewayError::Upstream {
            upstream: address.to_string(),
            why,
        })?;
    let problems = hub
        .check(upstream.peer())
        .await
        .map_err(|err| GatewayError::Upstream {
            upstream: address.to_string(),
            why: format!("did not list its tools: {err}"),
        })?;
    if !problems.is_empty() {
        let _ = upstream.cancel().await;
        return Err(GatewayError::Refused(problems));
    }
    if args.check {
        eprintln!("gateway: the configuration passes its check against {address}");
        let _ = upstream.cancel().await;
        return Ok(());
    }
    let store = open_store(store.or(config.store.clone())).await?;
    if let Some(address) = args.metrics {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(address)
            .install()
            .map_err(|err| {
                GatewayError::Serve(format!("cannot serve metrics at {address}: {err}"))
            })?;
        eprintln!("gateway: metrics for Prometheus at http://{address}/metrics");
    }
    let peer = upstream.peer().clone();
    let make = move || Gateway::new(hub.clone(), peer.clone(), store.clone(), runs);
    let serving = async move {
        match args.listen {
            None => serve::stdio(make()).await,
            Some(listen) => {
                let options = serve::HttpOptions {
                    listen,
                    stateless: args.stateless,
                    allow_hosts: args.allow_hosts,
                };
                serve::http(make, principals, options).await
            }
        }
    };
    // Serves until the clients leave (stdio) or the process ends (HTTP);
    // an upstream that closes its session ends the gateway, which a
    // supervisor restarts, rather than leave it answering every call with
    // an error.
    tokio::select! {
        served = serving => served,
        quit = upstream.waiting() => Err(GatewayError::Upstream {
            upstream: address.to_string(),
            why: match quit {
                Ok(reason) => format!("closed its session ({reason:?})"),
                Err(err) => format!("closed its session: {err}"),
            },
        }),
    }
}

fn upstream_address(args: &GatewayArgs, config: &Config) -> Result<UpstreamAddress, GatewayError> {
    if !args.command.is_empty() {
        return Ok(UpstreamAddress::Command(args.command.clone()));
    }
    if let Some(url) = &args.upstream_url {
        return Ok(UpstreamAddress::Url(url.clone()));
    }
    match (&config.upstream.command, &config.upstream.url) {
        (Some(command), None) if !command.is_empty() => {
            Ok(UpstreamAddress::Command(command.clone()))
        }
        (None, Some(url)) => Ok(UpstreamAddress::Url(url.clone())),
        (Some(_), Some(_)) => Err(GatewayError::Usage(
            "[upstream] names both a `command` and a `url`: give one".into(),
        )),
        _ => Err(GatewayError::Usage(
            "no upstream: give its command after `--`, --upstream-url, or `command` or `url` \
             under [upstream]"
                .into(),
        )),
    }
}

fn run_policy(config: &Config) -> RunPolicy {
    let mut policy = RunPolicy::new();
    if let Some(sources) = &config.runs.sources {
        for (source, name) in [
            (RunSource::Meta, RunSourceName::Meta),
            (RunSource::Extension, RunSourceName::Header),
            (RunSource::Principal, RunSourceName::Principal),
            (RunSource::Session, RunSourceName::Session),
        ] {
            if !sources.contains(&name) {
                policy = policy.without(source);
            }
        }
    }
    if config.runs.unscoped == UnscopedName::Refuse {
        policy = policy.refuse_unscoped();
    }
    policy
}

/// Opens the store the gateway keeps its claims in, creating its schema:
/// in memory when none is named.
async fn open_store(named: Option<String>) -> Result<Arc<dyn Store>, GatewayError> {
    let Some(named) = named else {
        eprintln!(
            "gateway: no store named (--store, IDEMPOTENT_STORE or `store` in the file): claims \
             are kept in memory, and a restart forgets them"
        );
        return Ok(Arc::new(MemoryStore::new()));
    };
    let target = Target::parse(&named).map_err(|err| GatewayError::Store {
        store: named.clone(),
        why: err.to_string(),
    })?;
    let failed = |why: String| GatewayError::Store {
        store: target.describe(),
        why,
    };
    target
        .open_store()
        .await
        .map_err(|err| failed(err.to_string()))
}
