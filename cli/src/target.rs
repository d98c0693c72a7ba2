//! Which store the command line names, and opening it without ever creating
//! a schema.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::store::SqliteStore;
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::deadpool_postgres::{Manager, Pool, Runtime};
use idempotent_tools::store::postgres::tokio_postgres::{Config, NoTls};
use idempotent_tools::{Store, StoreError};

use crate::error::CliError;

/// A store named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A Postgres URL.
    Postgres(String),
}

impl Target {
    /// Reads `--store`: a `postgres://` (or `postgresql://`) URL, a
    /// `sqlite://` path, or a plain file path.
    pub fn parse(text: &str) -> Result<Target, CliError> {
        if text.trim().is_empty() {
            return Err(CliError::NoStore);
        }
        let Some((scheme, rest)) = text.split_once("://") else {
            return Ok(Target::Sqlite(PathBuf::from(text)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Ok(Target::Postgres(text.to_owned())),
            "sqlite" => Ok(Target::Sqlite(PathBuf::from(rest))),
            _ => Err(CliError::UnknownScheme {
                scheme: scheme.to_owned(),
            }),
        }
    }

    /// The store as messages name it: a Postgres URL without its password.
    pub fn describe(&self) -> String {
        match self {
            Target::Sqlite(path) => path.display().to_string(),
            Target::Postgres(url) => redact(url),
        }
    }

    /// Opens the store, checking that it holds this library's schema and
    /// creating nothing.
    pub async fn open(&self) -> Result<Arc<dyn Store>, CliError> {
        let opened = match self {
            Target::Sqlite(path) => {
                if !path.is_file() {
                    return Err(CliError::NoFile(path.clone()));
                }
                SqliteStore::builder(path)
                    .create(false)
                    .connections(1)
                    .open()
                    .map(|store| Arc::new(store) as Arc<dyn Store>)
            }
            Target::Postgres(url) => {
                let mut config: Config = url.parse().map_err(|e| CliError::BadUrl {
                    url: redact(url),
                    source: e,
                })?;
                if config.get_connect_timeout().is_none() {
                    config.connect_timeout(Duration::from_secs(5));
                }
                // A pool of its own and no listener: the tool never waits on
                // a claim.
                let pool = Pool::builder(Manager::new(config, NoTls))
                    .max_size(2)
                    .runtime(Runtime::Tokio1)
                    .wait_timeout(Some(Duration::from_secs(10)))
                    .create_timeout(Some(Duration::from_secs(5)))
                    .build()
                    .map_err(|e| CliError::Open {
                        store: redact(url),
                        source: StoreError::Backend(Box::new(e)),
                    })?;
                let store = PostgresStoreBuilder::from_pool(pool)
                    .connect_lazy()
                    .map_err(|source| CliError::Open {
                        store: redact(url),
                        source,
                    })?;
                store
                    .check_schema()
                    .await
                    .map(|()| Arc::new(store) as Arc<dyn Store>)
            }
        };
        opened.map_err(|source| match source {
            StoreError::MissingSchema => CliError::MissingSchema {
                store: self.describe(),
            },
            source => CliError::Open {
                store: self.describe(),
                source,
            },
        })
    }
}

/// The URL without the password of its user.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_name_their_store() {
        assert_eq!(
            Target::parse("postgres://app@db/app").expect("url"),
            Target::Postgres("postgres://app@db/app".into())
        );
        assert_eq!(
            Target::parse("sqlite:///var/lib/claims.db").expect("sqlite url"),
            Target::Sqlite("/var/lib/claims.db".into())
        );
        assert_eq!(
            Target::parse("claims.db").expect("path"),
            Target::Sqlite("claims.db".into())
        );
        assert!(matches!(
            Target::parse("mysql://db/app"),
            Err(CliError::UnknownScheme { scheme }) if scheme == "mysql"
        ));
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        let target = Target::parse("postgres://app:s3cret@db/app").expect("url");
        assert_eq!(target.describe(), "postgres://app:***@db/app");
    }
}
