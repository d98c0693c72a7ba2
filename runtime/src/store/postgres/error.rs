//! Postgres's errors, sorted by what the guard may do about them, each
//! naming the statement that failed and the server's SQLSTATE.

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::store::StoreError;

/// The table is missing: the schema was never applied.
#[derive(Debug, thiserror::Error)]
#[error(
    "the table `idempotent_claims` does not exist in this database (or not on the search_path): \
     call `PostgresStore::migrate()` once at start-up, or have a DBA apply `POSTGRES_SCHEMA`"
)]
struct MissingSchema(#[source] tokio_postgres::Error);

/// A statement that failed: which, and the server's SQLSTATE when it
/// answered.
#[derive(Debug, thiserror::Error)]
#[error(
    "the `{statement}` statement failed{}",
    sqlstate.as_deref().map(|code| format!(" with SQLSTATE {code}")).unwrap_or_default()
)]
struct StatementFailed {
    statement: &'static str,
    sqlstate: Option<String>,
    #[source]
    source: tokio_postgres::Error,
}

/// A row that does not read as the schema says.
pub(super) fn corrupt(err: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(format!("a claim row could not be read: {err}"))
}

/// Sorts errors into "gave way to another writer" (nothing changed; go
/// again), "unreachable" (the action must not run, and a retry later may
/// work) and everything else, naming the statement that failed and
/// the server's SQLSTATE; the server's own message is the source.
pub(super) fn pg_error(
    statement: &'static str,
) -> impl Fn(tokio_postgres::Error) -> StoreError + Copy {
    move |err| {
        let Some(db) = err.as_db_error() else {
            // I/O, a closed connection, a timeout: the server was not reached.
            return StoreError::Unavailable(Box::new(StatementFailed {
                statement,
                sqlstate: None,
                source: err,
            }));
        };
        let code = db.code().clone();
        let class = code.code().get(..2).unwrap_or_default().to_owned();
        if code == SqlState::UNDEFINED_TABLE {
            return StoreError::Backend(Box::new(MissingSchema(err)));
        }
        let failed = Box::new(StatementFailed {
            statement,
            sqlstate: Some(code.code().to_owned()),
            source: err,
        });
        if code == SqlState::LOCK_NOT_AVAILABLE
            || code == SqlState::T_R_SERIALIZATION_FAILURE
            || code == SqlState::T_R_DEADLOCK_DETECTED
        {
            // A statement that gave way to another: a lock timeout, a
            // serialization failure, a deadlock. Each statement is its own
            // transaction, so it changed nothing, and may go again at once.
            StoreError::Contended(failed)
        } else if matches!(class.as_str(), "08" | "53" | "57") {
            // Connection exceptions, insufficient resources, operator
            // intervention (a shutdown, a cancelled statement): a retry
            // later may work.
            StoreError::Unavailable(failed)
        } else {
            StoreError::Backend(failed)
        }
    }
}

/// A pooled connection that could not be had.
pub(super) fn pool_error(err: PoolError) -> StoreError {
    match err {
        PoolError::Backend(err) => pg_error("connect")(err),
        other => StoreError::Unavailable(Box::new(other)),
    }
}

/// A statement's try that failed: at the pool or on the connection.
pub(super) enum Broken {
    Pool(PoolError),
    Statement(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for Broken {
    fn from(err: tokio_postgres::Error) -> Broken {
        Broken::Statement(err)
    }
}

impl Broken {
    pub(super) fn pool(err: PoolError) -> Broken {
        Broken::Pool(err)
    }

    /// Whether the connection broke rather than the statement failing: it
    /// was closed, could not be made, or the server is shutting down or
    /// starting up. Trying again on another connection may work.
    pub(super) fn is_broken(&self) -> bool {
        match self {
            Broken::Pool(PoolError::Backend(err)) | Broken::Statement(err) => is_broken(err),
            Broken::Pool(PoolError::Timeout(_)) => true,
            Broken::Pool(_) => false,
        }
    }

    /// Whether the server answered: it refused the statement, rather than
    /// being unreachable.
    pub(super) fn answered(&self) -> bool {
        matches!(self, Broken::Statement(err) if err.as_db_error().is_some() && !is_broken(err))
    }

    pub(super) fn into_store_error(self, statement: &'static str) -> StoreError {
        match self {
            Broken::Pool(err) => pool_error(err),
            Broken::Statement(err) => pg_error(statement)(err),
        }
    }
}

/// A closed connection, an I/O error, or a server that is shutting down,
/// crashed or not yet accepting connections.
fn is_broken(err: &tokio_postgres::Error) -> bool {
    match err.as_db_error() {
        None => true,
        Some(db) => {
            let code = db.code();
            code == &SqlState::ADMIN_SHUTDOWN
                || code == &SqlState::CRASH_SHUTDOWN
                || code == &SqlState::CANNOT_CONNECT_NOW
                || code.code().starts_with("08")
        }
    }
}
