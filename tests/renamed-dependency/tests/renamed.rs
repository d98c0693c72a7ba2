//! A dependency renamed in Cargo.toml: the guarded tool still acts once.

use idempotent_tools_renamed::{OrderId, refund, refunds};
use tools::Run;

#[tokio::test]
async fn a_tool_guarded_through_a_renamed_dependency_refunds_once() {
    let run = Run::new("run-renamed").expect("a run");
    let first = refund(&run, OrderId(1182), 4200).await.expect("fresh");
    let again = refund(&run, OrderId(1182), 4200).await.expect("replay");
    assert!(first.is_fresh(), "{first:?}");
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(refunds(), 1);
}
