//! Compile-fail cases for stacking `#[idempotent]` with the frameworks'
//! own attributes in an order that cannot work. Each case says why.

#[test]
fn stacking_orders_that_cannot_work_fail_with_an_error_naming_the_order_to_use() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui_frameworks/fail/*.rs");
}
