//! The compile-time rules of `#[idempotent]`: every case in `fail/` and
//! `frameworks/` must be refused with the message in its `.stderr` golden.
//! The cases in `frameworks/` stack `#[idempotent]` with rmcp's own
//! attributes in an order that cannot work, or leave out what the adapter
//! needs. What the attribute accepts is `tests/pass/`, built with the
//! workspace.
//!
//! The README's sections are built here too, as a reader would build them
//! (`readme`): both suites compile code in projects of their own, and in
//! one test binary they run side by side.
//!
//! Regenerate the goldens with
//! `TRYBUILD=overwrite cargo test -p idempotent-tools-ui --test ui`, then
//! read each one: it must name the culprit, say why it breaks idempotency,
//! and say what to write instead.

mod readme;

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("fail/*.rs");
    cases.compile_fail("frameworks/*.rs");
}
