//! "Don't know" is an answer: a tool whose error derives `Classify` never
//! acts again blindly after a failure that may have taken effect, and one
//! with `verify = ...` asks the provider and replays what it did. The
//! provider here takes no key, so a blind retry refunds twice.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use idempotent_tools::call::Key;
use idempotent_tools::{Classify, Error, Outcome, Run, Verified, idempotent};

use crate::provider::{PayError, Provider, Refund};
use crate::refund::run;

/// The tool's error, classified variant by variant.
#[derive(Debug, thiserror::Error, Classify)]
enum RefundError {
    #[error("the provider declined")]
    #[classify(definite)]
    Declined,
    #[error("the provider did not answer in time")]
    #[classify(unknown)]
    TimedOut,
    #[error(transparent)]
    Idempotency(#[from] Error),
}

impl From<PayError> for RefundError {
    fn from(err: PayError) -> RefundError {
        match err {
            PayError::TimedOut => RefundError::TimedOut,
            PayError::Idempotency(err) => RefundError::Idempotency(err),
            PayError::Declined | PayError::Run(_) => RefundError::Declined,
        }
    }
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_classified(
    run: Run,
    order_id: String,
    usd: u64,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, RefundError> {
    Ok(provider.refund(order_id, usd).await?)
}

/// Asks the provider, which lists refunds by order, whether this one was
/// made, and with the amount asked for.
async fn find_refund(
    _key: Key,
    _run: Run,
    order_id: String,
    usd: u64,
    provider: Arc<Provider>,
) -> Verified<Refund> {
    match provider.refund_of(&order_id) {
        Some(refund) if refund.usd == usd => Verified::Applied(refund),
        Some(refund) => Verified::Contradicts(format!("refunded {} instead", refund.usd)),
        None => Verified::NotApplied,
    }
}

#[idempotent(key = "<run>:refund:<order_id>", verify = find_refund)]
async fn refund_verified(
    run: Run,
    order_id: String,
    usd: u64,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, RefundError> {
    Ok(provider.refund(order_id, usd).await?)
}

/// The same tool with an error that does not classify: every error is
/// definite, as before classification existed.
#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_unclassified(
    run: Run,
    order_id: String,
    usd: u64,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    provider.refund(order_id, usd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_after_the_refund_is_unknown_and_the_retry_does_not_refund_again() {
    let run = run("classified-timeout");
    let provider = Provider::new();
    provider.time_out_after_next.store(true, Ordering::SeqCst);

    let first = refund_classified(run.clone(), "1182".into(), 42, Arc::clone(&provider)).await;
    assert!(matches!(first, Err(RefundError::TimedOut)), "{first:?}");
    let retry = refund_classified(run.clone(), "1182".into(), 42, Arc::clone(&provider)).await;
    assert!(
        matches!(
            retry,
            Err(RefundError::Idempotency(Error::UnknownOutcome { .. }))
        ),
        "{retry:?}"
    );
    assert_eq!(
        provider.calls(),
        1,
        "the retry did not refund a second time"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_definite_error_releases_the_claim_and_the_retry_refunds() {
    let run = run("classified-declined");
    let provider = Provider::new();
    provider.fail_next.store(true, Ordering::SeqCst);

    let first = refund_classified(run.clone(), "1182".into(), 42, Arc::clone(&provider)).await;
    assert!(matches!(first, Err(RefundError::Declined)), "{first:?}");
    let retry = refund_classified(run.clone(), "1182".into(), 42, Arc::clone(&provider))
        .await
        .expect("the retry refunds");
    assert!(retry.is_fresh());
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_error_that_does_not_classify_is_definite_so_a_blind_retry_refunds_twice() {
    let run = run("unclassified-timeout");
    let provider = Provider::new();
    provider.time_out_after_next.store(true, Ordering::SeqCst);

    let first = refund_unclassified(run.clone(), "1182".into(), 42, Arc::clone(&provider)).await;
    assert!(matches!(first, Err(PayError::TimedOut)), "{first:?}");
    let retry = refund_unclassified(run.clone(), "1182".into(), 42, Arc::clone(&provider))
        .await
        .expect("the retry refunds");
    assert!(retry.is_fresh());
    assert_eq!(
        provider.calls(),
        2,
        "the provider takes no key: refunded twice"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_verify_a_timeout_after_the_refund_returns_and_replays_the_providers_refund() {
    let run = run("verified-timeout");
    let provider = Provider::new();
    provider.time_out_after_next.store(true, Ordering::SeqCst);

    let first = refund_verified(run.clone(), "1182".into(), 42, Arc::clone(&provider))
        .await
        .expect("the provider says the refund was made");
    let made = first.value().cloned().expect("the provider's refund");
    assert_eq!(made.provider_call, 1);
    let retry = refund_verified(run.clone(), "1182".into(), 42, Arc::clone(&provider))
        .await
        .expect("the retry replays");
    assert!(retry.is_replay());
    assert_eq!(retry.value(), Some(&made));
    assert_eq!(provider.calls(), 1, "refunded once");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_verify_a_refund_of_another_amount_is_left_unknown_and_not_made_again() {
    let earlier = run("verified-contradicts-earlier");
    let run = run("verified-contradicts");
    let provider = Provider::new();
    // An earlier run refunded 41 on the order.
    let earlier = refund_verified(earlier, "1182".into(), 41, Arc::clone(&provider)).await;
    assert!(earlier.expect("refunded").is_fresh());
    provider.time_out_after_next.store(true, Ordering::SeqCst);

    let first = refund_verified(run.clone(), "1182".into(), 42, Arc::clone(&provider)).await;
    assert!(matches!(first, Err(RefundError::TimedOut)), "{first:?}");
    let retry = refund_verified(run.clone(), "1182".into(), 42, Arc::clone(&provider)).await;
    assert!(
        matches!(
            retry,
            Err(RefundError::Idempotency(Error::UnknownOutcome { .. }))
        ),
        "{retry:?}"
    );
    assert_eq!(provider.calls(), 2, "the retry did not refund a third time");
}
