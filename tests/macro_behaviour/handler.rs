//! A request handler of the tool author's own, written as the README shows
//! it: `Run::new(id)?` in a function that returns the author's error, which
//! wraps both the guard's `Error` and `RunError`.

use std::sync::Arc;

use idempotent_tools::{Outcome, Run, RunError};

use crate::provider::{PayError, Provider, Refund};
use crate::refund::refund_order;

/// One ask, under the run id the request carried.
async fn handle(
    run_id: &str,
    order_id: &str,
    provider: &Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    let run = Run::new(run_id)?;
    let outcome = refund_order(
        run,
        order_id.to_owned(),
        42,
        "customer asked".to_owned(),
        Arc::clone(provider),
    )
    .await?;
    Ok(outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_takes_its_run_with_question_mark_and_refunds_once() {
    let provider = Provider::new();
    let run_id = format!("handler-{}", std::process::id());
    let first = handle(&run_id, "1182", &provider).await.expect("a refund");
    let again = handle(&run_id, "1182", &provider).await.expect("a replay");
    assert!(first.is_fresh());
    assert!(again.is_replay());
    assert_eq!(provider.calls(), 1, "the provider refunded once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_run_id_is_the_authors_error_and_nothing_is_refunded() {
    let provider = Provider::new();
    let refused = handle("", "1182", &provider).await;
    assert!(
        matches!(refused, Err(PayError::Run(RunError::Empty))),
        "{refused:?}"
    );
    assert_eq!(provider.calls(), 0, "nothing reached the provider");
}
