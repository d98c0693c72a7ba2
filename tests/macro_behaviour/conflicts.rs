//! A key asked again with other arguments, or by another tool, is a
//! conflict: the action does not run, and another tool's result is never
//! shown.

use std::sync::Arc;

use idempotent_tools::{Outcome, Run, call::ConflictReason, idempotent};

use crate::provider::{PayError, Provider, Refund};
use crate::refund::{refund, run};

/// Another tool whose keys render like `refund_order`'s.
#[idempotent(key = "<run>:refund:<order_id>")]
async fn cancel_order(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    provider.refund(order_id, 0).await
}

#[tokio::test(flavor = "multi_thread")]
async fn other_arguments_in_flight_are_a_conflict_and_do_not_run() {
    let run = run("conflict-in-flight");
    let provider = Provider::gated();
    let first = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund(&run, "1182", 42, &provider).await }
    });
    provider.entered.notified().await;

    let other = refund(&run, "1182", 41, &provider)
        .await
        .expect("a conflict is not an error");
    match other {
        Outcome::Conflict { first, reason, .. } => {
            assert_eq!(reason, ConflictReason::Arguments);
            assert_eq!(first, None, "the first call has not finished");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    provider.open();
    assert!(
        first
            .await
            .expect("no panic")
            .expect("first succeeds")
            .is_fresh()
    );
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn other_arguments_after_completion_are_a_conflict_with_the_first_result() {
    let run = run("conflict-after");
    let provider = Provider::new();
    let first = refund(&run, "1182", 42, &provider)
        .await
        .expect("first succeeds");
    let other = refund(&run, "1182", 41, &provider)
        .await
        .expect("a conflict is not an error");
    match other {
        Outcome::Conflict {
            first: seen,
            reason,
            note,
        } => {
            assert_eq!(reason, ConflictReason::Arguments);
            assert_eq!(seen.as_ref(), first.value());
            assert_eq!(note, idempotent_tools::call::DEFAULT_CONFLICT_NOTE);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tool_with_a_key_that_renders_alike_is_a_conflict() {
    let run = run("other-tool");
    let provider = Provider::new();
    let refunded = refund(&run, "1182", 42, &provider)
        .await
        .expect("refund succeeds");
    assert!(refunded.is_fresh());
    let cancel = cancel_order(run.clone(), "1182".into(), Arc::clone(&provider))
        .await
        .expect("a conflict is not an error");
    match cancel {
        Outcome::Conflict { first, reason, .. } => {
            assert_eq!(reason, ConflictReason::OtherTool);
            assert_eq!(first, None, "never another tool's result");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(provider.calls(), 1, "the cancel never ran");
}
