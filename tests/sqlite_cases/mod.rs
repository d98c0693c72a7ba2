//! What only the SQLite store does, beyond the conformance suite: calls in
//! the action's own transaction in [`transactions`].

pub mod transactions;
