//! Which store the command line names, and opening it without ever creating
//! a schema.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use idempotent_tools::{records::Records, store::StoreError};

use crate::error::CliError;

/// A store named on the command line.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A Postgres URL, without its `schema` parameter, and the schema the
    /// store's tables are in, if the URL named one.
    Postgres {
        /// The server's URL.
        url: String,
        /// The schema the application's `PostgresStore` was built with.
        schema: Option<String>,
    },
    /// A Redis URL, without its `prefix` parameter, and the prefix of the
    /// store's keys.
    Redis {
        /// The server's URL.
        url: String,
        /// The prefix the application's `RedisStore` was built with.
        prefix: String,
    },
    /// A Redis Cluster, by the URLs of some of its nodes (each without the
    /// `prefix` parameter), and the prefix of the store's keys.
    RedisCluster {
        /// The nodes' URLs.
        nodes: Vec<String>,
        /// The prefix the application's `RedisStore` was built with.
        prefix: String,
    },
}

impl Target {
    /// Reads `--store`: a `postgres://` (or `postgresql://`) URL, a
    /// `redis://` (or `rediss://`) URL whose `prefix` parameter names the
    /// store's prefix (the default prefix without it), a `sqlite://` path,
    /// or a plain file path.
    pub fn parse(text: &str) -> Result<Target, CliError> {
        if text.trim().is_empty() {
            return Err(CliError::NoStore);
        }
        let Some((scheme, rest)) = text.split_once("://") else {
            return Ok(Target::Sqlite(PathBuf::from(text)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Ok(postgres_target(text)),
            "sqlite" => Ok(Target::Sqlite(PathBuf::from(rest))),
            #[cfg(feature = "redis")]
            "redis" | "rediss" => redis::target(text),
            #[cfg(feature = "redis")]
            "redis+cluster" | "rediss+cluster" => redis::cluster_target(scheme, rest),
            #[cfg(not(feature = "redis"))]
            "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
                Err(CliError::NotBuilt { feature: "redis" })
            }
            _ => Err(CliError::UnknownScheme {
                scheme: scheme.to_owned(),
            }),
        }
    }

    /// The store as messages name it: a Postgres URL without its password.
    pub fn describe(&self) -> String {
        match self {
            Target::Sqlite(path) => path.display().to_string(),
            Target::Postgres { url, schema } => match schema {
                Some(schema) => format!("{} (schema {schema})", redact(url)),
                None => redact(url),
            },
            Target::Redis { url, prefix } => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{}{sep}prefix={prefix}", redact(url))
            }
            Target::RedisCluster { nodes, prefix } => {
                let nodes: Vec<String> = nodes.iter().map(|node| redact(node)).collect();
                format!(
                    "the Redis Cluster at {} (prefix {prefix})",
                    nodes.join(", ")
                )
            }
        }
    }

    /// Opens the store, checking that it holds this library's schema and
    /// creating nothing.
    pub async fn open(&self) -> Result<Arc<dyn Records>, CliError> {
        let opened = match self {
            Target::Sqlite(path) => open_sqlite(path)?,
            Target::Postgres { url, schema } => postgres::open(url, schema.as_deref()).await?,
            Target::Redis { url, prefix } => redis::open(url, prefix).await?,
            Target::RedisCluster { nodes, prefix } => redis::open_cluster(nodes, prefix).await?,
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

#[cfg(feature = "gateway")]
impl Target {
    /// Opens the store for a program that calls through it, creating its
    /// schema (or file) if it is not there, as the application's own store
    /// would.
    pub async fn open_store(&self) -> Result<Arc<dyn idempotent_tools::store::Store>, StoreError> {
        Ok(match self {
            #[cfg(feature = "sqlite")]
            Target::Sqlite(path) => Arc::new(idempotent_tools::SqliteStore::open(path)?),
            #[cfg(feature = "postgres")]
            Target::Postgres { url, schema } => {
                let mut builder = idempotent_tools::PostgresStore::builder(url);
                if let Some(schema) = schema {
                    builder = builder.schema(schema);
                }
                let store = builder.connect().await?;
                store.migrate().await?;
                Arc::new(store)
            }
            #[cfg(feature = "redis")]
            Target::Redis { url, prefix } => Arc::new(
                idempotent_tools::RedisStore::builder(url.as_str())
                    .prefix(prefix)
                    .connect()
                    .await?,
            ),
            #[cfg(feature = "redis")]
            Target::RedisCluster { nodes, prefix } => Arc::new(
                idempotent_tools::RedisStore::builder_cluster(nodes.to_vec())
                    .prefix(prefix)
                    .connect()
                    .await?,
            ),
            #[allow(unreachable_patterns)]
            _ => {
                return Err(StoreError::BadSetting {
                    setting: "store",
                    problem: "this build of the tool has no support for this store".into(),
                });
            }
        })
    }
}

/// A `postgres://` URL: its `schema` parameter taken out as the schema the
/// store's tables are in, every other parameter left for the client.
fn postgres_target(text: &str) -> Target {
    let Some((base, query)) = text.split_once('?') else {
        return Target::Postgres {
            url: text.to_owned(),
            schema: None,
        };
    };
    let mut schema = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", name)) => schema = Some(name.to_owned()),
            _ => rest.push(pair),
        }
    }
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Target::Postgres { url, schema }
}

/// What opening a store gives: the store, or why not.
type Opened = Result<Arc<dyn Records>, StoreError>;

#[cfg(feature = "sqlite")]
fn open_sqlite(path: &Path) -> Result<Opened, CliError> {
    if !path.is_file() {
        return Err(CliError::NoFile(path.to_owned()));
    }
    Ok(idempotent_tools::SqliteStore::builder(path)
        .create(false)
        .connections(1)
        .open()
        .map(|store| Arc::new(store) as Arc<dyn Records>))
}

#[cfg(not(feature = "sqlite"))]
fn open_sqlite(_: &Path) -> Result<Opened, CliError> {
    Err(CliError::NotBuilt { feature: "sqlite" })
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::Arc;
    use std::time::Duration;

    use idempotent_tools::records::Records;
    use idempotent_tools::store::postgres::PostgresStoreBuilder;
    use idempotent_tools::store::postgres::tokio_postgres::Config;

    use super::{Opened, redact};
    use crate::error::CliError;

    pub async fn open(url: &str, schema: Option<&str>) -> Result<Opened, CliError> {
        let mut config: Config = url.parse().map_err(|e| CliError::BadUrl {
            url: redact(url),
            source: e,
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        // No listener: the tool never waits on a claim.
        let mut builder = PostgresStoreBuilder::from_config(config).without_listener();
        if let Some(schema) = schema {
            builder = builder.schema(schema);
        }
        let store = match builder.connect_lazy() {
            Ok(store) => store,
            Err(source) => return Ok(Err(source)),
        };
        Ok(store
            .check_schema()
            .await
            .map(|()| Arc::new(store) as Arc<dyn Records>))
    }
}

#[cfg(not(feature = "postgres"))]
mod postgres {
    use super::Opened;
    use crate::error::CliError;

    pub async fn open(_: &str, _: Option<&str>) -> Result<Opened, CliError> {
        Err(CliError::NotBuilt {
            feature: "postgres",
        })
    }
}

// Redis keeps no schema: the prefix is the whole of the store's layout, and
// a prefix with nothing under it is an empty store.
#[cfg(feature = "redis")]
mod redis {
    use std::sync::Arc;

    use idempotent_tools::RedisStore;
    use idempotent_tools::records::Records;
    use idempotent_tools::store::redis::DEFAULT_PREFIX;

    use super::{Opened, Target, redact};
    use crate::error::CliError;

    pub async fn open(url: &str, prefix: &str) -> Result<Opened, CliError> {
        Ok(RedisStore::builder(url)
            .prefix(prefix)
            .connect()
            .await
            .map(|store| Arc::new(store) as Arc<dyn Records>))
    }

    pub async fn open_cluster(nodes: &[String], prefix: &str) -> Result<Opened, CliError> {
        Ok(RedisStore::builder_cluster(nodes.to_vec())
            .prefix(prefix)
            .connect()
            .await
            .map(|store| Arc::new(store) as Arc<dyn Records>))
    }

    /// A `redis://` URL: its `prefix` parameter taken out as the store's
    /// prefix, every other parameter left for the client.
    pub fn target(text: &str) -> Result<Target, CliError> {
        let mut url = url::Url::parse(text).map_err(|source| CliError::BadRedisUrl {
            url: redact(text),
            source,
        })?;
        let mut prefix = None;
        let mut rest = Vec::new();
        for (name, value) in url.query_pairs() {
            match name.as_ref() {
                "prefix" => prefix = Some(value.into_owned()),
                _ => rest.push((name.into_owned(), value.into_owned())),
            }
        }
        if rest.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(rest);
        }
        Ok(Target::Redis {
            url: url.into(),
            prefix: prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned()),
        })
    }

    /// A `redis+cluster://[USER[:PASSWORD]@]HOST:PORT,HOST:PORT[/DB][?prefix=P]`
    /// URL: one `redis://` URL per node, each with the user, the path and the
    /// parameters given, and the store's prefix.
    pub fn cluster_target(scheme: &str, rest: &str) -> Result<Target, CliError> {
        let node_scheme = scheme
            .to_ascii_lowercase()
            .trim_end_matches("+cluster")
            .to_owned();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (format!("{user}@"), hosts),
            None => (String::new(), authority),
        };
        let mut nodes = Vec::new();
        let mut prefix = DEFAULT_PREFIX.to_owned();
        for host in hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
        {
            match target(&format!("{node_scheme}://{user}{host}{tail}"))? {
                Target::Redis { url, prefix: given } => {
                    nodes.push(url);
                    prefix = given;
                }
                _ => unreachable!("a redis:// URL names one server"),
            }
        }
        if nodes.is_empty() {
            return Err(CliError::NoClusterNodes);
        }
        Ok(Target::RedisCluster { nodes, prefix })
    }
}

#[cfg(not(feature = "redis"))]
mod redis {
    use super::Opened;
    use crate::error::CliError;

    pub async fn open(_: &str, _: &str) -> Result<Opened, CliError> {
        Err(CliError::NotBuilt { feature: "redis" })
    }

    pub async fn open_cluster(_: &[String], _: &str) -> Result<Opened, CliError> {
        Err(CliError::NotBuilt { feature: "redis" })
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
    #[cfg(feature = "redis")]
    use idempotent_tools::store::redis::DEFAULT_PREFIX;

    #[test]
    fn urls_and_paths_name_their_store() {
        let postgres = |url: &str, schema: Option<&str>| Target::Postgres {
            url: url.into(),
            schema: schema.map(Into::into),
        };
        assert_eq!(
            Target::parse("postgres://app@db/app").expect("url"),
            postgres("postgres://app@db/app", None)
        );
        assert_eq!(
            Target::parse("postgres://app@db/app?schema=shop_idempotent").expect("url"),
            postgres("postgres://app@db/app", Some("shop_idempotent"))
        );
        assert_eq!(
            Target::parse("postgresql://db/app?sslmode=disable&schema=s1&connect_timeout=3")
                .expect("url"),
            postgres(
                "postgresql://db/app?sslmode=disable&connect_timeout=3",
                Some("s1")
            ),
            "other parameters stay for the client"
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

    #[cfg(feature = "redis")]
    #[test]
    fn a_redis_url_names_its_prefix_or_takes_the_default() {
        let redis = |url: &str, prefix: &str| Target::Redis {
            url: url.into(),
            prefix: prefix.into(),
        };
        assert_eq!(
            Target::parse("redis://cache:6379/2").expect("url"),
            redis("redis://cache:6379/2", DEFAULT_PREFIX)
        );
        assert_eq!(
            Target::parse("redis://cache/2?prefix=shop:idempotent:").expect("url"),
            redis("redis://cache/2", "shop:idempotent:")
        );
        assert_eq!(
            Target::parse("rediss://cache/0?protocol=resp3&prefix=a%3Ab%3A").expect("url"),
            redis("rediss://cache/0?protocol=resp3", "a:b:"),
            "other parameters stay for the client; the prefix is decoded"
        );
        assert!(matches!(
            Target::parse("redis://cache:notaport/0"),
            Err(CliError::BadRedisUrl { .. })
        ));
        assert_eq!(
            Target::parse("redis://cache/2").expect("url").describe(),
            "redis://cache/2?prefix=idempotent:"
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_cluster_url_names_each_node_with_the_user_and_the_prefix() {
        assert_eq!(
            Target::parse("redis+cluster://ops:s3cret@10.0.0.1:7000,10.0.0.2:7001/?prefix=shop:")
                .expect("url"),
            Target::RedisCluster {
                nodes: vec![
                    "redis://ops:s3cret@10.0.0.1:7000/".to_owned(),
                    "redis://ops:s3cret@10.0.0.2:7001/".to_owned(),
                ],
                prefix: "shop:".to_owned(),
            }
        );
        let target = Target::parse("rediss+cluster://node-a:7000").expect("url");
        assert_eq!(
            target,
            Target::RedisCluster {
                nodes: vec!["rediss://node-a:7000".to_owned()],
                prefix: DEFAULT_PREFIX.to_owned(),
            }
        );
        assert!(matches!(
            Target::parse("redis+cluster://,/?prefix=p:"),
            Err(CliError::NoClusterNodes)
        ));
        let described = Target::parse("redis+cluster://ops:s3cret@a:1,b:2")
            .expect("url")
            .describe();
        assert!(!described.contains("s3cret"), "{described}");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_password_never_reaches_a_message() {
        let target = Target::parse("postgres://app:s3cret@db/app").expect("url");
        assert_eq!(target.describe(), "postgres://app:***@db/app");
        let target = Target::parse("redis://:s3cret@cache/0?prefix=p:").expect("url");
        assert_eq!(target.describe(), "redis://:***@cache/0?prefix=p:");
        let target = Target::parse("redis://ops:s3cret@cache/0").expect("url");
        assert!(!target.describe().contains("s3cret"));
    }
}
