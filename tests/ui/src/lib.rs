//! The compile-time rules of `#[idempotent]`: what it refuses, with the
//! compiler's message (`tests/ui.rs`, cases under `fail/` and
//! `frameworks/`), and what it accepts (`tests/pass/`).
