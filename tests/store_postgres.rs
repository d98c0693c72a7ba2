//! The Postgres store against a real server: the conformance suite (several
//! OS processes included, and claims racing from several connections, where
//! READ COMMITTED lets a loser see no row), and what is Postgres's own
//! (`postgres_cases`): round trips counted on the wire, LISTEN/NOTIFY,
//! schema versions, SQLSTATEs, a server that is down. The suite's restart
//! cases run on a Postgres server of their own (`postgres_cases::server`),
//! shut down and started again.
//!
//! The server's address comes from `IDEMPOTENT_POSTGRES_URL`. Without it
//! every case is reported as ignored ("needs IDEMPOTENT_POSTGRES_URL"),
//! except in CI, where it fails. Every store gets a schema of its own,
//! dropped afterwards.

mod coalesced;
mod harness;
mod partition;
mod postgres_cases;

use idempotent_tools::PostgresStore;
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::tokio_postgres::{self, Config, NoTls};
use idempotent_tools_testing::conformance::{Scope, Suite, kit};
use postgres_cases::server::Server;

const URL: &str = "IDEMPOTENT_POSTGRES_URL";

/// The server's URL. The harness runs a case that needs it only when it is
/// set (see `harness::trial`).
fn url() -> Option<String> {
    std::env::var(URL).ok()
}

fn unique_schema() -> String {
    format!("idempotent_test_{}", kit::unique_id())
}

/// A connection for the test's own statements.
async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("Postgres at {URL} must be reachable: {e}"));
    tokio::spawn(connection);
    client
}

fn config_in(url: &str, schema: &str) -> Config {
    let mut config: Config = url.parse().expect("a Postgres URL");
    config.options(format!("-c search_path={schema}"));
    config
}

/// A fresh schema, dropped when this is.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    async fn new() -> Option<Schema> {
        let url = url()?;
        let name = unique_schema();
        admin(&url)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a schema");
        Some(Schema { url, name })
    }

    fn config(&self) -> Config {
        config_in(&self.url, &self.name)
    }

    /// The schema's connection settings with more of the server's session
    /// settings (`-c lock_timeout=50ms`, say), as a role's would be.
    fn config_with(&self, options: &str) -> Config {
        let mut config = self.config();
        config.options(format!("-c search_path={} {options}", self.name));
        config
    }

    /// A store of its own (its own pool and listener) in this schema, migrated.
    async fn store(&self) -> PostgresStore {
        self.store_with(|builder| builder).await
    }

    /// A store of its own in this schema, set up as `set_up` says, migrated.
    async fn store_with(
        &self,
        set_up: impl FnOnce(PostgresStoreBuilder) -> PostgresStoreBuilder,
    ) -> PostgresStore {
        let builder = PostgresStoreBuilder::from_config(self.config());
        let store = set_up(builder).connect_lazy().expect("a store");
        store.migrate().await.expect("migrate");
        store
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Dropped inside the test's runtime: drop the schema from a thread
        // of its own.
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

/// The schema of a case of the conformance suite.
fn schema_of(scope: &Scope) -> String {
    format!("idempotent_conformance_{}", scope.id())
}

/// The case's store, in a schema of its own, migrated, purging in the
/// batches the case asks for. A child process opens its parent's schema.
async fn in_scope(scope: Scope) -> PostgresStore {
    let url = url().expect("the suite runs only with the server's URL");
    let name = schema_of(&scope);
    if !scope.is_child() {
        admin(&url)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a schema");
    }
    let mut builder = PostgresStoreBuilder::from_config(config_in(&url, &name));
    if let Some(rows) = scope.purge_batch() {
        builder = builder.purge_batch(rows);
    }
    let store = builder.connect_lazy().expect("a store");
    if scope.is_child() {
        assert!(store.listening().await, "the child listens for completions");
    } else {
        store.migrate().await.expect("migrate");
    }
    store
}

/// Drops the case's schema.
async fn drop_schema(scope: Scope) {
    let url = url().expect("the suite runs only with the server's URL");
    admin(&url)
        .await
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            schema_of(&scope)
        ))
        .await
        .expect("drop the schema");
}

/// A store on a Postgres server of the case's own, for the restart cases.
/// One batch of a kind goes at a time, so that calls made while the server
/// is away queue and go together: the batched statements meet the restart.
async fn on_a_server_of_its_own(_scope: Scope) -> (PostgresStore, Server) {
    let server = tokio::task::spawn_blocking(Server::start)
        .await
        .expect("the server's start")
        .expect("Postgres's programs (Server::can_start said so)");
    let store = PostgresStore::builder(&server.url())
        .coalesce_in_flight(1)
        .connect_lazy()
        .expect("a store");
    store.migrate().await.expect("migrate");
    (store, server)
}

fn main() {
    // A child of `transactions`' kill -9 case: it writes, then is killed.
    if let Ok(schema) = std::env::var(postgres_cases::transactions::CHILD_SCHEMA) {
        postgres_cases::transactions::child(&schema);
    }
    let mut suite = Suite::new(in_scope)
        .with_records()
        .requiring_env(URL)
        .cleaning_up(drop_schema)
        .racing_callers(200)
        .purging_in_batches()
        .counting_statements(PostgresStore::statements);
    if Server::can_start() {
        suite = suite.restarting(on_a_server_of_its_own);
    }
    let mut trials = suite.trials();
    trials.extend(postgres_cases::trials());
    harness::main_waiting(trials);
}
