//! The gateway's configuration file: which upstream tools are guarded, by
//! which key template, under which policy, and where their claims are kept.
//!
//! ```toml
//! store = "sqlite://gateway.db"
//!
//! [upstream]
//! command = ["npx", "-y", "@acme/refund-server"]
//!
//! [tools.refund_order]
//! key = "<run>:refund:<order_id>"
//! free_text = ["memo"]
//! takeover = "report-unknown"
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where claims and records are kept, as `--store` names a store.
    pub store: Option<String>,
    /// The MCP server the gateway stands in front of.
    #[serde(default)]
    pub upstream: Upstream,
    /// Where a request's run comes from.
    #[serde(default)]
    pub runs: Runs,
    /// Who may call over HTTP.
    #[serde(default)]
    pub auth: Auth,
    /// The guarded tools, by the upstream's name for them.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
}

/// `[upstream]`: a command that serves MCP over stdio, or a streamable
/// HTTP URL.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The program and its arguments.
    pub command: Option<Vec<String>>,
    /// The server's streamable HTTP endpoint.
    pub url: Option<String>,
}

/// `[runs]`: the rmcp adapter's run order, by source name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runs {
    /// The sources allowed, of `meta`, `header`, `principal` and `session`;
    /// all of them when absent.
    pub sources: Option<Vec<RunSourceName>>,
    /// What a request that none of them scopes gets.
    #[serde(default)]
    pub unscoped: UnscopedName,
}

/// A run source as the file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunSourceName {
    /// `_meta["idempotent/run"]`.
    Meta,
    /// The `Idempotent-Run` header.
    Header,
    /// The principal `[auth]` established.
    Principal,
    /// The session the gateway issued, or the stdio connection.
    Session,
}

/// `unscoped = "server-wide" | "refuse"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnscopedName {
    /// One run shared by every unscoped request (of a principal).
    #[default]
    ServerWide,
    /// Refuse the call, nothing done.
    Refuse,
}

/// `[auth]`: how an HTTP request's principal is established.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    /// Bearer tokens, each mapped to the principal it proves.
    #[serde(default)]
    pub tokens: Vec<Token>,
    /// A header that a trusted proxy in front of the gateway sets to the
    /// authenticated principal.
    pub principal_header: Option<String>,
}

/// `[[auth.tokens]]`: a bearer token, inline or read from the environment.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Token {
    /// Who presents it.
    pub principal: String,
    /// The token itself.
    pub token: Option<String>,
    /// The environment variable that holds the token.
    pub token_env: Option<String>,
}

/// `[tools.<name>]`: one guarded tool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// The key template over the tool's arguments: `<run>:refund:<order_id>`.
    pub key: String,
    /// Arguments that are the model's own wording, by dotted path: refused in
    /// the key and left out of the fingerprint.
    #[serde(default)]
    pub free_text: Vec<String>,
    /// Arguments whose names read as free text but are ids: vouched for.
    #[serde(default)]
    pub identifiers: Vec<String>,
    /// The claim's lease.
    #[serde(default, deserialize_with = "duration")]
    pub lease: Option<Duration>,
    /// How long a repeat waits for the call in flight.
    #[serde(default, deserialize_with = "duration")]
    pub wait: Option<Duration>,
    /// How long a completed record is kept.
    #[serde(default, deserialize_with = "duration")]
    pub retention: Option<Duration>,
    /// What a call does with a claim whose holder stopped mid-action.
    #[serde(default)]
    pub takeover: TakeoverName,
    /// What a tool result with `isError: true` means.
    #[serde(default)]
    pub tool_errors: ToolErrors,
}

/// `takeover = "report-unknown" | "rerun"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TakeoverName {
    /// Record the outcome as unknown: for upstreams that take no key.
    #[default]
    ReportUnknown,
    /// Act again: only for upstreams that deduplicate on the key passed.
    Rerun,
}

/// `tool_errors = "unknown" | "definite" | "replay"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolErrors {
    /// The tool may have acted before it failed: the outcome is recorded as
    /// unknown, and no retry acts until an operator resolves it.
    #[default]
    Unknown,
    /// The tool fails only before it acts: the claim is released, and a
    /// retry acts again.
    Definite,
    /// The error is the call's result: recorded, and replayed to a repeat.
    Replay,
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(deserializer)?;
    crate::print::parse_age(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Why the file could not be read, in one line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not there or not readable.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not this configuration.
    #[error("{path}:{line}:{column}: {message}")]
    Malformed {
        /// The file.
        path: String,
        /// Where, from 1.
        line: usize,
        /// Where, from 1.
        column: usize,
        /// What is wrong there.
        message: String,
    },
}

impl Config {
    /// Reads the file.
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&path.display().to_string(), &text)
    }

    /// Reads the text of a file named `path`.
    pub fn parse(path: &str, text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|err| {
            let at = err.span().map_or(0, |span| span.start);
            let before = text.get(..at).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            ConfigError::Malformed {
                path: path.to_owned(),
                line,
                column,
                message: err.message().replace('\n', " ").trim().to_owned(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_reads_with_its_policy() {
        let config = Config::parse(
            "gateway.toml",
            r#"
store = "gateway.db"
[upstream]
command = ["node", "server.mjs"]
[tools.refund_order]
key = "<run>:refund:<order_id>"
free_text = ["memo"]
lease = "30s"
retention = "7d"
takeover = "rerun"
tool_errors = "replay"
"#,
        )
        .unwrap();
        let tool = &config.tools["refund_order"];
        assert_eq!(tool.lease, Some(Duration::from_secs(30)));
        assert_eq!(tool.retention, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(tool.takeover, TakeoverName::Rerun);
        assert_eq!(tool.tool_errors, ToolErrors::Replay);
    }

    #[test]
    fn a_malformed_file_is_one_line_with_where() {
        let err = Config::parse("gateway.toml", "[tools.refund_order]\nkee = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("gateway.toml:2:1: unknown field `kee`"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }
}
