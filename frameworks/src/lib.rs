//! The rig and rmcp examples and tests of `idempotent-tools`.
//!
//! They live in a package of their own, which is never published, so that
//! `cargo run --example refund` builds only what the main example uses; the
//! workspace's test command still runs them all.
