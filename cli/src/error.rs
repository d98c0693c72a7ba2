//! What can go wrong, the exit code each gives, and what to do next.

use std::process::ExitCode;

#[cfg(feature = "postgres")]
use idempotent_tools::store::postgres::tokio_postgres;
use idempotent_tools::{call::KeyError, store::StoreError};

/// The exit codes scripts can rely on (listed in `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The command did what it was asked.
    Ok = 0,
    /// The store failed or could not be reached.
    Failed = 1,
    /// The command line, or the store it names, is wrong: a usage error, an
    /// unknown URL scheme, no such file, a database without the schema.
    Usage = 2,
    /// No record under the key (or digest) given.
    NotFound = 3,
    /// Nothing was changed because it was refused: a live claim without
    /// `--force`, or the confirmation declined.
    Refused = 4,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

/// A failed command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--store` is empty.
    #[error("no store given")]
    NoStore,
    /// `--store` has a scheme other than `postgres://`, `redis://` or
    /// `sqlite://`.
    #[error("unknown store URL scheme `{scheme}://`")]
    UnknownScheme {
        /// The scheme given.
        scheme: String,
    },
    /// `--store` names a file that does not exist.
    #[cfg(feature = "sqlite")]
    #[error("there is no SQLite file at `{}`", .0.display())]
    NoFile(std::path::PathBuf),
    /// `--store` names a store this build of the tool has no support for.
    #[cfg(not(all(feature = "sqlite", feature = "postgres", feature = "redis")))]
    #[error("this build of the tool has no `{feature}` store")]
    NotBuilt {
        /// The feature that builds it.
        feature: &'static str,
    },
    /// `--store` is not a URL Postgres reads.
    #[cfg(feature = "postgres")]
    #[error("`{url}` is not a valid Postgres URL")]
    BadUrl {
        /// The URL, without its password.
        url: String,
        /// What the parser said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// `--store` is not a URL a Redis client reads.
    #[cfg(feature = "redis")]
    #[error("`{url}` is not a valid Redis URL")]
    BadRedisUrl {
        /// The URL, without its password.
        url: String,
        /// What the parser said.
        #[source]
        source: url::ParseError,
    },
    /// A `redis+cluster://` URL names no node.
    #[cfg(feature = "redis")]
    #[error("the Redis Cluster URL names no node")]
    NoClusterNodes,
    /// The database holds none of this library's schema.
    #[error("the database at `{store}` holds no idempotent-tools schema")]
    MissingSchema {
        /// The store, as named.
        store: String,
    },
    /// The store could not be opened.
    #[error("could not open the store at `{store}`")]
    Open {
        /// The store, as named.
        store: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// A store operation failed.
    #[error("could not {doing}")]
    Store {
        /// What was being done.
        doing: &'static str,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The key given is not one a template renders, so no record is under it.
    #[error(transparent)]
    BadKey(KeyError),
    /// No record under the key.
    #[error("no record under key `{0}`")]
    NotFound(String),
    /// No record whose key's digest begins with the hex given.
    #[error("no record whose key digest begins with `{0}`")]
    DigestNotFound(String),
    /// Several records' digests begin with the hex given.
    #[error("{count} records' key digests begin with `{prefix}`")]
    AmbiguousDigest {
        /// The hex given.
        prefix: String,
        /// How many matched.
        count: usize,
    },
    /// The digest given is not hex.
    #[error("`{0}` is not a key digest: expected hex digits, as traces print them")]
    BadDigest(String),
    /// The claim's lease is live: its action may be running.
    #[error("key `{key}` is held by a claim whose lease is live: its action may be running now")]
    LiveClaim {
        /// The key.
        key: String,
    },
    /// `resolve --applied` was given text that is not JSON.
    #[error("the value given with `--applied` is not JSON")]
    BadJson(#[source] serde_json::Error),
    /// The store refused to resolve the key: a live claim, or an outcome
    /// already known. In the library's own words.
    #[error(transparent)]
    Unresolved(StoreError),
    /// `forget` could not ask for confirmation.
    #[error("`forget` asks for confirmation, but standard input is not a terminal")]
    NoTerminal,
    /// The operator answered no.
    #[error("not forgotten: the record under `{0}` is unchanged")]
    Declined(String),
    /// Writing the output failed.
    #[error("could not write the output")]
    Output(#[source] std::io::Error),
}

impl CliError {
    /// The exit code.
    pub fn exit(&self) -> Exit {
        match self {
            CliError::NoStore
            | CliError::UnknownScheme { .. }
            | CliError::MissingSchema { .. }
            | CliError::AmbiguousDigest { .. }
            | CliError::BadDigest(_)
            | CliError::BadKey(_)
            | CliError::BadJson(_)
            | CliError::NoTerminal => Exit::Usage,
            #[cfg(feature = "sqlite")]
            CliError::NoFile(_) => Exit::Usage,
            #[cfg(not(all(feature = "sqlite", feature = "postgres", feature = "redis")))]
            CliError::NotBuilt { .. } => Exit::Usage,
            #[cfg(feature = "postgres")]
            CliError::BadUrl { .. } => Exit::Usage,
            #[cfg(feature = "redis")]
            CliError::BadRedisUrl { .. } | CliError::NoClusterNodes => Exit::Usage,
            CliError::NotFound(_) | CliError::DigestNotFound(_) => Exit::NotFound,
            CliError::LiveClaim { .. } | CliError::Declined(_) | CliError::Unresolved(_) => {
                Exit::Refused
            }
            CliError::Open {
                source: StoreError::BadSetting { .. },
                ..
            } => Exit::Usage,
            CliError::Open { .. } | CliError::Store { .. } | CliError::Output(_) => Exit::Failed,
        }
    }

    /// What to do next, if there is advice.
    pub fn help(&self) -> Option<String> {
        let help = match self {
            CliError::NoStore | CliError::UnknownScheme { .. } => {
                "give `--store` (or IDEMPOTENT_STORE) a SQLite file path, a postgres:// URL, \
                 a redis:// URL or a redis+cluster:// URL, such as `--store /var/lib/shop/claims.db`, \
                 `--store postgres://app@db.internal/app` or \
                 `--store redis://cache.internal/2?prefix=shop:idempotent:`"
                    .into()
            }
            #[cfg(feature = "sqlite")]
            CliError::NoFile(_) => "check the path: it must be the file the application's \
                `SqliteStore` opens; this tool never creates one"
                .into(),
            #[cfg(not(all(feature = "sqlite", feature = "postgres", feature = "redis")))]
            CliError::NotBuilt { feature } => format!(
                "install the tool with this store: `cargo install idempotent-tools-cli \
                 --features {feature}` (each store is a feature, all on by default)"
            ),
            #[cfg(feature = "postgres")]
            CliError::BadUrl { .. } => {
                "write it as postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE".into()
            }
            #[cfg(feature = "redis")]
            CliError::BadRedisUrl { .. } => "write it as \
                redis://[USER][:PASSWORD@]HOST[:PORT][/DB][?prefix=PREFIX], with the prefix the \
                application's `RedisStore` was built with"
                .into(),
            #[cfg(feature = "redis")]
            CliError::NoClusterNodes => "write it as \
                redis+cluster://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][?prefix=PREFIX], with \
                one or more of the Cluster's nodes"
                .into(),
            CliError::MissingSchema { .. } => "point `--store` at the database the application \
                uses; the application creates the schema (`SqliteStore::open`, \
                `PostgresStore::migrate`), this tool never does"
                .into(),
            CliError::Open {
                source: StoreError::SchemaTooNew { .. },
                ..
            } => "install the release of this tool that matches the application: \
                  `cargo install idempotent-tools-cli --version VERSION`"
                .into(),
            CliError::Open {
                source: StoreError::BadSetting { .. },
                ..
            } => "give `?schema=` the schema the application's `PostgresStore` was built with \
                  (`PostgresStoreBuilder::schema`)"
                .into(),
            CliError::Open {
                source: StoreError::CannotOpen { .. },
                ..
            } => "check the path: its directory must exist and this user must be able to \
                  write there; the application creates the file, so point `--store` at the \
                  one it uses"
                .into(),
            CliError::Open {
                source: StoreError::Unavailable(_),
                ..
            }
            | CliError::Store {
                source: StoreError::Unavailable(_),
                ..
            } => "check that the store's server is up and reachable, then run the command again"
                .into(),
            CliError::Open {
                source: StoreError::Contended(_),
                ..
            }
            | CliError::Store {
                source: StoreError::Contended(_),
                ..
            } => "another session holds a lock on the store's table (a migration, a long \
                  transaction): run the command again once it is done"
                .into(),
            CliError::Open { .. } => "the store's server answered, but refused: check the \
                URL's user, password and database (the last cause above is the server's own \
                words), and that this user may read the application's tables"
                .into(),
            CliError::Store {
                source: StoreError::Corrupt(_),
                ..
            } => "a record this tool cannot read was left as it is; `idempotent-tools show KEY` \
                  reads the others one at a time"
                .into(),
            CliError::Store { .. } => "nothing was changed by the step that failed; run the \
                command again, and if it fails the same way, the last cause above is the \
                store's own words"
                .into(),
            CliError::NotFound(_) => "list the keys there are with `idempotent-tools list` \
                (`--run RUN` narrows it); a key must be given in full, as `list` prints it"
                .into(),
            CliError::DigestNotFound(_) => {
                "the record may have been forgotten or purged; `idempotent-tools list` shows \
                 what there is"
                    .into()
            }
            CliError::AmbiguousDigest { .. } => "give more hex digits of the digest".into(),
            CliError::BadKey(_) => "give the key in full, as `idempotent-tools list` prints it \
                (in quotes, for the shell), or find the record by the digest traces print, \
                with `--digest HEX`"
                .into(),
            CliError::BadDigest(_) => "give the `key` field of a trace, such as \
                `idempotent-tools show --digest 3f2a9c41d07b5e88`"
                .into(),
            CliError::LiveClaim { .. } => "wait for the action to finish or for its lease to run \
                out (`idempotent-tools show KEY` says when), or pass `--force` if its holder is \
                known to be gone; a forced forget lets a retry run the action alongside it"
                .into(),
            CliError::NoTerminal => "pass `--yes` to forget without asking".into(),
            CliError::BadJson(_) => "give the result as the tool would have returned it, as \
                JSON in single quotes for the shell, such as \
                `--applied '{\"id\":\"re_1\"}'`; nothing was written"
                .into(),
            CliError::Unresolved(StoreError::LiveClaim { .. }) => "nothing was changed; \
                `idempotent-tools show KEY` says when the lease runs out, and once it has, \
                the key can be resolved"
                .into(),
            CliError::Unresolved(_) => "only a key `idempotent-tools pending` lists is \
                resolved; `idempotent-tools show KEY` shows this one; nothing was changed"
                .into(),
            _ => return None,
        };
        Some(help)
    }

    /// Prints the error, each cause once, and the advice, as `error:`,
    /// `caused by:` and `help:` lines on standard error.
    pub fn report(&self) {
        let mut last = self.to_string();
        eprintln!("error: {last}");
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            // Some errors print their cause in their own message too.
            let text = cause.to_string();
            if !last.ends_with(&text) {
                eprintln!("  caused by: {text}");
            }
            last = text;
            source = cause.source();
        }
        if let Some(help) = self.help() {
            eprintln!("help: {help}");
        }
    }
}
