//! The tool on Postgres: every command in a schema of its own, a database
//! without the schema or with a newer one, and a server it cannot reach.

use idempotent_tools::PostgresStore;
use idempotent_tools::store::postgres::tokio_postgres::{self, NoTls};

use crate::commands::{every_command, stats_and_purge};
use crate::records::{fresh_run, keys, one_of_each};
use crate::run::cli;

/// Where the Postgres cases find their server.
pub const URL: &str = "IDEMPOTENT_POSTGRES_URL";

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

pub async fn every_command_on_postgres() {
    let schema = Schema::new().await;
    let store = schema.store().await;
    every_command(&store, &schema.url()).await;
}

pub async fn stats_and_purge_on_postgres() {
    let schema = Schema::new().await;
    let store = schema.store().await;
    stats_and_purge(&store, &schema.url()).await;
}

pub async fn a_postgres_database_without_the_schema_is_bad_usage_and_gets_none() {
    let schema = Schema::new().await;
    let out = cli(&schema.url(), &["list"]).expect(2);
    assert!(
        out.stderr.contains("holds no idempotent-tools schema"),
        "{}",
        out.stderr
    );
    assert_eq!(schema.tables().await, 0, "the tool created tables");
}

pub async fn a_postgres_schema_newer_than_the_tool_is_refused() {
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

pub async fn a_database_that_does_not_exist_fails_and_says_what_to_check() {
    let url = std::env::var(URL).expect("the server's URL");
    let mut config: tokio_postgres::Config = url.parse().expect("a Postgres URL");
    config.dbname("idempotent_tools_no_such_database");
    let missing = format!(
        "postgres://{}@{}:{}/idempotent_tools_no_such_database",
        config.get_user().unwrap_or("postgres"),
        match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        },
        config.get_ports().first().copied().unwrap_or(5432),
    );
    let out = cli(&missing, &["list"]).expect(1);
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("help: the store's server answered, but refused"),
        "{}",
        out.stderr
    );
}

pub async fn a_key_that_does_not_exist_on_postgres_is_not_found() {
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

pub async fn an_unreachable_server_fails_and_says_what_to_check() {
    let out = cli("postgres://postgres@127.0.0.1:1/test", &["list"]).expect(1);
    assert!(
        out.stderr
            .contains("could not open the store at `postgres://"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("help: check that the store's server is up"),
        "{}",
        out.stderr
    );
}

pub async fn a_password_in_the_url_never_reaches_a_message() {
    let out = cli("postgres://app:s3cret@127.0.0.1:1/test", &["list"]).expect(1);
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
}

pub async fn the_urls_schema_parameter_names_the_stores_schema() {
    let schema = Schema::new().await;
    let store = PostgresStore::builder(&schema.url)
        .schema(schema.name.as_str())
        .connect_lazy()
        .expect("a store");
    store.migrate().await.expect("migrate");
    let run = one_of_each(&store).await;
    let sep = if schema.url.contains('?') { '&' } else { '?' };
    let in_schema = |name: &str| format!("{}{sep}schema={name}", schema.url);

    let listed = cli(&in_schema(&schema.name), &["list", "--json", "--run", &run])
        .expect(0)
        .json();
    assert_eq!(keys(&listed).len(), 6, "{listed}");

    // A name that is not a plain identifier is bad usage, and says why.
    let out = cli(&in_schema("Shop%22"), &["list"]).expect(2);
    assert!(
        out.stderr.contains("`schema` setting is refused"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("help: give `?schema=`"),
        "{}",
        out.stderr
    );

    // A schema that is not there is a store without the schema, and the
    // tool creates nothing.
    let missing = format!("{}_missing", schema.name);
    let out = cli(&in_schema(&missing), &["list"]).expect(2);
    assert!(
        out.stderr.contains("holds no idempotent-tools schema"),
        "{}",
        out.stderr
    );
    let created: bool = admin(&schema.url)
        .await
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&missing],
        )
        .await
        .expect("schemas")
        .get(0);
    assert!(!created, "the tool created the schema `{missing}`");
}
