//! `#[idempotent]` deduplicates exactly as the guard does: the annotated
//! function is called as a tool would be, and every call that reaches the
//! stand-in provider is counted.

mod provider;
mod refund;

mod conflicts;
mod duplicates;
mod handler;
mod keys;
mod options;
mod release;
mod unknown;
