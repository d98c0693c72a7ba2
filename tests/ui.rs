//! The compile-time rules of `#[idempotent]`: every case in `ui/fail` must be
//! refused with the message in its `.stderr` golden, and every case in
//! `ui/pass` must build and run.
//!
//! Regenerate the goldens with
//! `TRYBUILD=overwrite cargo test --all-features --test ui` (the README's
//! test command's features: rustc names some types shorter in a smaller build),
//! then read each one: it must name the culprit, say why it breaks
//! idempotency, and say what to write instead.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
