//! rig tools whose refund is a row in the application's own database,
//! written in the call's transaction: on SQLite through a hand-written
//! `Tool` that runs `Call::run_in_transaction`, on Postgres through
//! `#[idempotent(.., transaction)]`, both on a method a hand-written `Tool`
//! delegates to and above `#[rig_tool]`. rig's scripted model asks twice
//! in one step and again in the next; every test counts the rows the
//! ledger holds.
//!
//! The Postgres cases need `IDEMPOTENT_POSTGRES_URL`; without it they are
//! reported as ignored (and fail when `CI` is set).

#[allow(dead_code)]
#[path = "framework_rig_common/script.rs"]
mod script;

use std::sync::{Arc, OnceLock};

use idempotent_tools::call::{Call, Key, KeyError};
use idempotent_tools::rig::{InRun, run_of};
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::tokio_postgres::{self, Config, NoTls, Transaction};
use idempotent_tools::store::sqlite::rusqlite;
use idempotent_tools::{Outcome, PostgresStore, Run, SqliteStore, idempotent};
use libtest_mimic::{Arguments, Failed, Trial};
use rig_agent::AgentBuilder;
use rig_core::rig_tool;
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use script::{assert_one_fresh_then_replays, duplicates, run_prompt};

const POSTGRES_URL: &str = "IDEMPOTENT_POSTGRES_URL";

/// A refund as the ledger keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Refunded {
    id: String,
    order_id: String,
    usd: i64,
}

#[derive(Debug, thiserror::Error)]
enum LedgerError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
    #[error("the ledger failed")]
    Sqlite(#[from] rusqlite::Error),
    #[error("the ledger failed")]
    Postgres(#[from] tokio_postgres::Error),
}

impl From<KeyError> for LedgerError {
    fn from(e: KeyError) -> LedgerError {
        LedgerError::Idempotency(e.into())
    }
}

#[derive(Deserialize)]
struct RefundArgs {
    order_id: String,
    usd: i64,
    reason: String,
}

fn refund_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order_id": { "type": "string" },
            "usd": { "type": "integer" },
            "reason": { "type": "string" }
        },
        "required": ["order_id", "usd", "reason"]
    })
}

const LEDGER: &str =
    "CREATE TABLE refunds (id SERIAL PRIMARY KEY, order_id TEXT NOT NULL, usd BIGINT NOT NULL)";

// ---------------------------------------------------------------------------
// SQLite: a hand-written tool running the call in the ledger's transaction.

struct SqliteRefund {
    store: Arc<SqliteStore>,
}

impl Tool for SqliteRefund {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Outcome<Refunded>;
    type Error = LedgerError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Outcome<Refunded>, LedgerError> {
        let run = run_of(context)?;
        let key = Key::builder()
            .part("run", &run)?
            .literal(":refund:")?
            .part("order_id", &args.order_id)?
            .finish()?;
        let RefundArgs { order_id, usd, .. } = args;
        Call::new("shop::refund", key)
            .run_in_transaction(&self.store, move |tx: &rusqlite::Transaction<'_>| {
                tx.execute(
                    "INSERT INTO refunds (order_id, usd) VALUES (?1, ?2)",
                    rusqlite::params![order_id, usd],
                )?;
                Ok(Refunded {
                    id: format!("re_{}", tx.last_insert_rowid()),
                    order_id,
                    usd,
                })
            })
            .await
    }
}

async fn sqlite_ledger_written_in_the_calls_transaction_once_for_duplicates() -> Result<(), Failed>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shop.db");
    let store = Arc::new(SqliteStore::open(&path)?);
    rusqlite::Connection::open(&path)?.execute_batch(
        "CREATE TABLE refunds (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, usd INTEGER NOT NULL)",
    )?;
    let agent = AgentBuilder::new(duplicates("2101"))
        .tool(SqliteRefund { store })
        .build();
    let results = run_prompt(&agent, "rig-tx-sqlite").await;
    let rows: i64 = rusqlite::Connection::open(&path)?.query_row(
        "SELECT count(*) FROM refunds WHERE order_id = '2101'",
        [],
        |row| row.get(0),
    )?;
    assert_eq!(rows, 1, "one row in the ledger");
    assert_one_fresh_then_replays(&results);
    Ok(())
}

// ---------------------------------------------------------------------------
// Postgres: `#[idempotent(.., transaction)]`.

/// The application's database in a schema of its own, dropped afterwards.
struct Schema {
    url: String,
    name: String,
}

async fn admin(url: &str) -> Result<tokio_postgres::Client, Failed> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

impl Schema {
    async fn new(url: String, name: &str) -> Result<Schema, Failed> {
        let name = format!("{name}_{}", std::process::id());
        admin(&url)
            .await?
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .await?;
        Ok(Schema { url, name })
    }

    /// The store, migrated, with the ledger's table beside its own.
    async fn store(&self) -> Result<PostgresStore, Failed> {
        let mut config: Config = self.url.parse()?;
        config.options(format!("-c search_path={}", self.name));
        let store = PostgresStoreBuilder::from_config(config).connect().await?;
        store.migrate().await?;
        store.pool().get().await?.batch_execute(LEDGER).await?;
        Ok(store)
    }

    async fn rows(&self, order_id: &str) -> Result<i64, Failed> {
        let sql = format!(
            "SELECT count(*) FROM {}.refunds WHERE order_id = $1",
            self.name
        );
        Ok(admin(&self.url)
            .await?
            .query_one(&sql, &[&order_id])
            .await?
            .get(0))
    }

    async fn drop_it(self) -> Result<(), Failed> {
        admin(&self.url)
            .await?
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name))
            .await?;
        Ok(())
    }
}

/// The shop, with its database: a hand-written tool delegates to a method
/// under `#[idempotent(.., transaction)]`.
struct PostgresRefund {
    db: PostgresStore,
}

impl PostgresRefund {
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.db, transaction)]
    async fn refund(
        &self,
        run: Run,
        order_id: String,
        usd: i64,
        #[free_text] reason: String,
        #[transaction] tx: &Transaction<'_>,
    ) -> Result<Outcome<Refunded>, LedgerError> {
        let _ = reason;
        let row = tx
            .query_one(
                "INSERT INTO refunds (order_id, usd) VALUES ($1, $2) RETURNING id",
                &[&order_id, &usd],
            )
            .await?;
        Ok(Refunded {
            id: format!("re_{}", row.get::<_, i32>(0)),
            order_id,
            usd,
        })
    }
}

impl Tool for PostgresRefund {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Outcome<Refunded>;
    type Error = LedgerError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Outcome<Refunded>, LedgerError> {
        let run = run_of(context)?;
        self.refund(run, args.order_id, args.usd, args.reason).await
    }
}

async fn postgres_method_writes_in_the_calls_transaction_once_for_duplicates(
    url: String,
) -> Result<(), Failed> {
    let schema = Schema::new(url, "idempotent_rig_tx_method").await?;
    let db = schema.store().await?;
    let agent = AgentBuilder::new(duplicates("2102"))
        .tool(PostgresRefund { db })
        .build();
    let results = run_prompt(&agent, "rig-tx-pg-method").await;
    assert_eq!(schema.rows("2102").await?, 1, "one row in the ledger");
    assert_one_fresh_then_replays(&results);
    schema.drop_it().await
}

/// The store of the `#[rig_tool]` below, which has no state of its own.
static DB: OnceLock<PostgresStore> = OnceLock::new();

fn db() -> &'static PostgresStore {
    DB.get()
        .expect("the test sets the store before the agent runs")
}

// `#[idempotent]` above `#[rig_tool]`: the guard takes the transaction out
// of the signature before rig reads it, so the tool's schema holds the ask
// alone.
#[idempotent(key = "<run>:refund:<order_id>", store = db(), transaction)]
#[rig_tool(
    name = "refund",
    description = "Refund an order",
    params(
        order_id = "The order to refund",
        usd = "Dollars to refund",
        reason = "Why"
    )
)]
async fn refund_in_ledger(
    order_id: String,
    usd: i64,
    #[free_text] reason: String,
    #[transaction] tx: &Transaction<'_>,
) -> Result<Outcome<Refunded>, LedgerError> {
    let _ = reason;
    let row = tx
        .query_one(
            "INSERT INTO refunds (order_id, usd) VALUES ($1, $2) RETURNING id",
            &[&order_id, &usd],
        )
        .await?;
    Ok(Refunded {
        id: format!("re_{}", row.get::<_, i32>(0)),
        order_id,
        usd,
    })
}

async fn postgres_rig_tool_writes_in_the_calls_transaction_once_for_duplicates(
    url: String,
) -> Result<(), Failed> {
    let schema = Schema::new(url, "idempotent_rig_tx_tool").await?;
    if DB.set(schema.store().await?).is_err() {
        return Err("the store was set twice".into());
    }
    let tool = InRun(RefundInLedger);
    let properties = tool.parameters()["properties"].clone();
    assert_eq!(
        properties.as_object().map(|p| {
            let mut names: Vec<_> = p.keys().cloned().collect();
            names.sort();
            names
        }),
        Some(vec!["order_id".into(), "reason".into(), "usd".into()]),
        "the model is asked for the ask alone, never the transaction"
    );
    let agent = AgentBuilder::new(duplicates("2103")).tool(tool).build();
    let results = run_prompt(&agent, "rig-tx-pg-tool").await;
    assert_eq!(schema.rows("2103").await?, 1, "one row in the ledger");
    assert_one_fresh_then_replays(&results);
    schema.drop_it().await
}

// ---------------------------------------------------------------------------

type Case = std::pin::Pin<Box<dyn Future<Output = Result<(), Failed>> + Send>>;

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let url = std::env::var(POSTGRES_URL).ok();
    let in_ci = std::env::var_os("CI").is_some();
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(Failed::from)
    };
    let on_postgres = |name: &str, case: fn(String) -> Case| {
        let given = url.clone();
        let trial = Trial::test(name, move || match given {
            Some(url) => runtime()?.block_on(case(url)),
            None => Err(format!("{POSTGRES_URL} is not set, and CI is").into()),
        });
        trial.with_ignored_flag(url.is_none() && !in_ci)
    };
    let trials = vec![
        Trial::test(
            "a_sqlite_ledger_written_in_the_calls_transaction_holds_one_row_for_duplicates",
            move || {
                runtime()?
                    .block_on(sqlite_ledger_written_in_the_calls_transaction_once_for_duplicates())
            },
        ),
        on_postgres(
            "a_method_under_idempotent_transaction_writes_one_row_for_duplicates (needs IDEMPOTENT_POSTGRES_URL)",
            |url| {
                Box::pin(postgres_method_writes_in_the_calls_transaction_once_for_duplicates(url))
            },
        ),
        on_postgres(
            "idempotent_transaction_above_rig_tool_writes_one_row_and_shows_the_ask_alone (needs IDEMPOTENT_POSTGRES_URL)",
            |url| {
                Box::pin(postgres_rig_tool_writes_in_the_calls_transaction_once_for_duplicates(url))
            },
        ),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}
