//! The claim protocol of `idempotent-tools`, as a model.
#![deny(missing_docs)]

pub mod callers;
pub mod store;
