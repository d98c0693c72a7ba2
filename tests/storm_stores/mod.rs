//! The stores the storm targets run on, each of its own: an SQLite file in
//! a temporary directory, a Postgres schema, a Redis key prefix, and what
//! removes each afterwards.
#![allow(dead_code)]

use std::sync::Arc;

use idempotent_tools::SqliteStore;
use idempotent_tools::store::Store;

/// An SQLite store in a directory of its own, kept as long as the store.
pub fn sqlite() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("a directory");
    let store = Arc::new(SqliteStore::open(dir.path().join("claims.db")).expect("a store"));
    (dir, store)
}

/// A Postgres store in a schema of its own, and the connection that drops
/// the schema afterwards.
#[cfg(feature = "postgres")]
pub async fn postgres() -> (Arc<dyn Store>, impl AsyncFnOnce()) {
    use idempotent_tools::store::postgres::tokio_postgres::{self, Config, NoTls};

    let url = std::env::var("IDEMPOTENT_POSTGRES_URL").expect("the harness checked it");
    let schema = format!(
        "idempotent_storm_{}",
        idempotent_tools_testing::conformance::kit::unique_id()
    );
    let (admin, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("Postgres must be reachable");
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("a schema");
    let mut config: Config = url.parse().expect("a Postgres URL");
    config.options(format!("-c search_path={schema}"));
    let store = idempotent_tools::store::postgres::PostgresStoreBuilder::from_config(config)
        .connect()
        .await
        .expect("a store");
    store.migrate().await.expect("the schema");
    let drop_schema = async move || {
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("the schema dropped");
    };
    (Arc::new(store), drop_schema)
}

/// A Redis store under a key prefix of its own, and what deletes its keys
/// afterwards.
#[cfg(feature = "redis")]
pub async fn redis() -> (Arc<dyn Store>, impl AsyncFnOnce()) {
    use idempotent_tools::RedisStore;
    use idempotent_tools::store::redis::redis;

    let url = std::env::var("IDEMPOTENT_REDIS_URL").expect("the harness checked it");
    let prefix = format!(
        "idempotent-storm:{}:",
        idempotent_tools_testing::conformance::kit::unique_id()
    );
    let store = RedisStore::builder(url.as_str())
        .prefix(prefix.as_str())
        .connect()
        .await
        .expect("a store");
    let delete_keys = async move || {
        let mut admin = redis::Client::open(url.as_str())
            .expect("a Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("Redis must be reachable");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut admin)
            .await
            .expect("keys");
        if !keys.is_empty() {
            let () = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut admin)
                .await
                .expect("keys deleted");
        }
    };
    (Arc::new(store), delete_keys)
}
