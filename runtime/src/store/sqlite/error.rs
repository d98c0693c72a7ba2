//! SQLite's errors, sorted by what the guard may do about them.

use rusqlite::ErrorCode;

use crate::store::StoreError;

/// Sorts SQLite's errors into "unreachable" (the action must not run, and a
/// retry later may work) and everything else.
pub(super) fn store_error(err: rusqlite::Error) -> StoreError {
    let unavailable = matches!(
        err.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::ReadOnly
                | ErrorCode::DiskFull
                | ErrorCode::OutOfMemory
        )
    );
    if unavailable {
        StoreError::Unavailable(Box::new(err))
    } else {
        StoreError::Backend(Box::new(err))
    }
}
