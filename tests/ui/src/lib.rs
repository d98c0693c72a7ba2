//! The compile-time rules of `#[idempotent]`, as cases under `pass/`,
//! `fail/` and `frameworks/`: see `tests/ui.rs`.
