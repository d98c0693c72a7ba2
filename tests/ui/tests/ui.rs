//! The compile-time rules of `#[idempotent]`: every case in `fail/` and
//! `frameworks/` must be refused with the message in its `.stderr` golden,
//! and every case in `pass/` must build and run. The cases in `frameworks/`
//! stack `#[idempotent]` with rmcp's own attributes in an order that cannot
//! work, or leave out what the adapter needs.
//!
//! Regenerate the goldens with
//! `TRYBUILD=overwrite cargo test -p idempotent-tools-ui`, then read each
//! one: it must name the culprit, say why it breaks idempotency, and say
//! what to write instead.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("pass/*.rs");
    cases.compile_fail("fail/*.rs");
    cases.compile_fail("frameworks/*.rs");
}
