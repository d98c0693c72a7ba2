//! A refund that is a row in the shop's own database rather than a call to a
//! provider: the ledger of refunds in an SQLite file, with the claims in
//! the same file.
//!
//! Both versions crash once, between their write and the record of the
//! call. Written with `#[idempotent]`, the write has committed on its own
//! and the retry writes again; run with [`Call::run_in_transaction`], the
//! write and the record commit together, so the crash left neither and the
//! retry writes once.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use idempotent_tools::call::{Call, Key};
use idempotent_tools::store::sqlite::rusqlite::{self, Connection, Transaction, params};
use idempotent_tools::{CallId, Outcome, Run, SqliteStore, idempotent};
use idempotent_tools_testing::{Refund, Runner, ScriptedModel, Tools};
use serde::Serialize;

use super::attempt::Attempt;
use super::shop::{PayError, RefundArgs};

/// The shop's database: its ledger of refunds and the guard's claims, in one
/// file. Fresh for each row.
#[derive(Clone)]
pub struct Ledger {
    dir: Arc<tempfile::TempDir>,
    store: Arc<SqliteStore>,
    /// Ledger writes the tool began, the crashed one included.
    writes: Arc<AtomicUsize>,
    /// Set until the first write has crashed.
    crash_next: Arc<AtomicBool>,
}

impl Ledger {
    pub fn new() -> Result<Ledger, PayError> {
        let dir = tempfile::tempdir().map_err(|e| PayError::Ledger(e.to_string()))?;
        let path = dir.path().join("shop.db");
        let store = SqliteStore::open(&path)?;
        Connection::open(&path)?.execute_batch(
            "CREATE TABLE refunds (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, usd INTEGER NOT NULL)",
        )?;
        Ok(Ledger {
            dir: Arc::new(dir),
            store: Arc::new(store),
            writes: Arc::default(),
            crash_next: Arc::new(AtomicBool::new(true)),
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("shop.db")
    }

    /// Refunds committed in the ledger: what the customer gets.
    pub fn refunds_on_file(&self) -> Result<usize, PayError> {
        let count: i64 = Connection::open(self.path())?.query_row(
            "SELECT count(*) FROM refunds",
            [],
            |row| row.get(0),
        )?;
        Ok(usize::try_from(count).unwrap_or_default())
    }

    /// Writes the refund in `db` (its own transaction, or the call's).
    fn write(&self, db: &Connection, order_id: &str, usd: u64) -> Result<Refund, PayError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let usd_column = i64::try_from(usd).map_err(|e| PayError::Ledger(e.to_string()))?;
        db.execute(
            "INSERT INTO refunds (order_id, usd) VALUES (?1, ?2)",
            params![order_id, usd_column],
        )?;
        let refund = Refund {
            id: format!("re_{}", db.last_insert_rowid()),
            order_id: order_id.to_owned(),
            usd,
        };
        if self.crash_next.swap(false, Ordering::SeqCst) {
            // Stands for the process dying here: after the write, before
            // the call is recorded. (`resume_unwind` skips the panic message.)
            std::panic::resume_unwind(Box::new("crashed after the write"));
        }
        Ok(refund)
    }

    /// The write commits on its own, then the claim is completed: a crash
    /// between the two leaves a refund the guard knows nothing of.
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store)]
    async fn refund_order(
        &self,
        order_id: String,
        usd: u64,
        #[free_text] _reason: String,
    ) -> Result<Outcome<Refund>, PayError> {
        let db = Connection::open(self.path())?;
        self.write(&db, &order_id, usd)
    }

    /// The write and the completion of the claim commit in one transaction.
    async fn refund_order_in_transaction(
        &self,
        order_id: String,
        usd: u64,
    ) -> Result<Outcome<Refund>, PayError> {
        let key = Key::builder()
            .run()?
            .literal(":refund:")?
            .part("order_id", &order_id)?
            .finish()?;
        let ledger = self.clone();
        Call::new("shop::refund_order", key)
            .run_in_transaction(&self.store, move |tx: &Transaction<'_>| {
                ledger.write(tx, &order_id, usd)
            })
            .await
    }
}

/// The version written with `#[idempotent]`.
pub async fn guarded(
    ledger: Ledger,
    args: RefundArgs,
    _call: CallId,
) -> Result<Outcome<Refund>, PayError> {
    crash_is_an_error(async move {
        ledger
            .refund_order(args.order_id, args.usd, args.reason)
            .await
    })
    .await
}

/// The version run in the ledger's transaction.
pub async fn in_transaction(
    ledger: Ledger,
    args: RefundArgs,
    _call: CallId,
) -> Result<Outcome<Refund>, PayError> {
    crash_is_an_error(async move {
        ledger
            .refund_order_in_transaction(args.order_id, args.usd)
            .await
    })
    .await
}

/// Runs the tool in a task of its own, in the current run, so that its
/// crash reaches the model as a failed call, as from a process that died.
async fn crash_is_an_error<T: Send + 'static>(
    tool: impl Future<Output = Result<T, PayError>> + Send + 'static,
) -> Result<T, PayError> {
    let run = Run::current().ok_or(PayError::Crashed)?;
    match tokio::spawn(run.scope(tool)).await {
        Ok(result) => result,
        Err(_) => Err(PayError::Crashed),
    }
}

/// Plays `model` against `version` with a fresh ledger, and counts its rows.
pub async fn attempt<F, Fut, T>(
    runner: &Runner,
    model: ScriptedModel,
    version: F,
) -> Result<Attempt, PayError>
where
    F: Fn(Ledger, RefundArgs, CallId) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, PayError>> + Send + 'static,
    T: Serialize,
{
    let ledger = Ledger::new()?;
    let behind = ledger.clone();
    let tools = Tools::new().tool("refund_order", move |args, call| {
        version(behind.clone(), args, call)
    });
    let transcript = runner.run(model, &tools).await;
    Ok(Attempt {
        refunds_on_file: ledger.refunds_on_file()?,
        calls_received: ledger.writes.load(Ordering::SeqCst),
        transcript,
    })
}

impl From<rusqlite::Error> for PayError {
    fn from(e: rusqlite::Error) -> PayError {
        PayError::Ledger(e.to_string())
    }
}

impl From<idempotent_tools::store::StoreError> for PayError {
    fn from(e: idempotent_tools::store::StoreError) -> PayError {
        PayError::Ledger(e.to_string())
    }
}

impl From<idempotent_tools::RunError> for PayError {
    fn from(e: idempotent_tools::RunError) -> PayError {
        PayError::Idempotency(e.into())
    }
}

impl From<idempotent_tools::call::KeyError> for PayError {
    fn from(e: idempotent_tools::call::KeyError) -> PayError {
        PayError::Idempotency(e.into())
    }
}
