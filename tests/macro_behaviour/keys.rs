//! The key a call claims: what it is built from (never the call id), where
//! `<run>` comes from, and the same key used again inside its own action.

use std::sync::Arc;

use idempotent_tools::{Error, MemoryStore, Outcome, Run, current_key, idempotent};

use crate::provider::{PayError, Provider, Refund};
use crate::refund::run;

/// Keys on the run in scope.
#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_in_run(
    order_id: String,
    usd: u64,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    provider.refund(order_id, usd).await
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_reentrant(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<String>, PayError> {
    let inner = Box::pin(refund_reentrant(run, order_id, Arc::clone(&provider))).await;
    match inner {
        Err(PayError::Idempotency(Error::Reentrant { key })) => Ok(key.to_string()),
        other => panic!("expected a re-entrancy error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn using_the_key_again_inside_its_own_action_fails_at_once() {
    let run = run("reentrant");
    let outcome = refund_reentrant(run.clone(), "1182".into(), Provider::new())
        .await
        .expect("the outer call succeeds");
    assert_eq!(
        outcome.into_value(),
        Some(format!("{}:refund:1182", run.as_str()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_on_the_run_with_no_run_in_scope_fails_and_does_not_act() {
    let provider = Provider::new();
    let result = refund_in_run("1182".into(), 42, Arc::clone(&provider)).await;
    assert!(matches!(
        result,
        Err(PayError::Idempotency(Error::MissingRun))
    ));
    assert_eq!(provider.calls(), 0);

    let outcome = run("scoped")
        .scope(refund_in_run("1182".into(), 42, Arc::clone(&provider)))
        .await
        .expect("a run in scope is used");
    assert!(outcome.is_fresh());
    assert_eq!(provider.calls(), 1);
}

/// Returns the key its body sees. `store` is the call's own store, so every
/// call can run fresh and show its key.
#[idempotent(key = "<run>:refund:<order_id>", store = &store)]
async fn key_seen(
    run: Run,
    order_id: u64,
    tool_call_id: String,
    #[context] store: Arc<MemoryStore>,
) -> Result<Outcome<String>, PayError> {
    let _ = tool_call_id;
    Ok(current_key().map(|k| k.to_string()).unwrap_or_default())
}

async fn key_for(run: &Run, order_id: u64, call_id: &str) -> String {
    key_seen(
        run.clone(),
        order_id,
        call_id.into(),
        Arc::new(MemoryStore::new()),
    )
    .await
    .expect("the call succeeds")
    .into_value()
    .expect("a fresh call has a value")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_ask_under_a_new_call_id_has_the_same_key() {
    let run = run("keys");
    let first = key_for(&run, 1182, "call_a").await;
    let again = key_for(&run, 1182, "call_b").await;
    assert_eq!(first, again);
    assert_eq!(first, format!("{}:refund:1182", run.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn another_order_has_another_key() {
    let run = run("keys-order");
    assert_ne!(
        key_for(&run, 1182, "call_a").await,
        key_for(&run, 1183, "call_a").await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_ask_under_a_new_call_id_is_a_replay() {
    let run = run("call-id");
    let store = Arc::new(MemoryStore::new());
    let first = key_seen(run.clone(), 1182, "call_a".into(), Arc::clone(&store))
        .await
        .expect("first succeeds");
    let again = key_seen(run.clone(), 1182, "call_b".into(), Arc::clone(&store))
        .await
        .expect("again succeeds");
    assert!(first.is_fresh());
    assert!(
        again.is_replay(),
        "the call id is neither keyed nor fingerprinted"
    );
}
