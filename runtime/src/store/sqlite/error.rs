//! SQLite's errors, sorted by what the guard may do about them.

use rusqlite::ErrorCode;

use crate::store::StoreError;

/// Sorts SQLite's errors into "unreachable" (the action must not run, and a
/// retry later may work) and everything else.
pub(super) fn store_error(err: rusqlite::Error) -> StoreError {
    match err.sqlite_error_code() {
        // Another connection held the file's lock past the busy timeout:
        // nothing changed, and the step may go again.
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Contended(Box::new(err))
        }
        Some(
            ErrorCode::CannotOpen
            | ErrorCode::SystemIoFailure
            | ErrorCode::ReadOnly
            | ErrorCode::DiskFull
            | ErrorCode::OutOfMemory,
        ) => StoreError::Unavailable(Box::new(err)),
        _ => StoreError::Backend(Box::new(err)),
    }
}
