//! The rig and rmcp examples and tests of `idempotent-tools`.
//!
//! They live in a package of their own, which is never published, so that
//! `cargo run --example refund` builds only what the main example uses; the
//! workspace's test command still runs them all.

// Every Rust block of the README is compiled and run as a doctest of this
// package, whose dev-dependencies include the frameworks the README shows.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}

// The guide's chapters, which the facade shows as `idempotent_tools::guide`,
// compiled and run here for the same reason.
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../../guide/calls.md")]
    mod calls {}
    #[doc = include_str!("../../guide/keys.md")]
    mod keys {}
    #[doc = include_str!("../../guide/stores.md")]
    mod stores {}
    #[doc = include_str!("../../guide/operations.md")]
    mod operations {}
    #[doc = include_str!("../../guide/rig.md")]
    mod rig {}
    #[doc = include_str!("../../guide/rmcp.md")]
    mod rmcp {}
    #[doc = include_str!("../../guide/testing.md")]
    mod testing {}
    #[doc = include_str!("../../guide/transactions.md")]
    mod transactions {}
    #[doc = include_str!("../../guide/unknown.md")]
    mod unknown {}
    #[doc = include_str!("../../guide/gateway.md")]
    mod gateway {}
}
