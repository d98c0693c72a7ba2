//! For operators: read, count, resolve, forget and purge a store's records.
//!
//! The guard never calls any of this. A store offers it by implementing
//! [`Records`] beside [`Store`](crate::store::Store); every store of this
//! crate does. The `idempotent-tools` command-line tool is built on it, and
//! a [`Purger`] keeps a store small on a timer. A record's state is one of
//! the four words [`RecordState`] lists, the same in every store, the
//! command-line tool's output, metrics and traces.

pub use crate::store::purger::{Purger, PurgerError};
pub use crate::store::record::RecordState;
pub use crate::store::records::{
    DEFAULT_PAGE, Forget, MAX_PAGE, PurgedBatch, Record, RecordCount, RecordPage, RecordQuery,
    Records, Resolution,
};
