//! What only the SQLite store does, beyond the conformance suite: calls in
//! the action's own transaction in [`transactions`], and steps coalesced
//! into one transaction in [`batches`].

pub mod batches;
pub mod transactions;
