//! The attribute's options: `wait`, `record_errors`, `note` and `store`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use idempotent_tools::{Error, MemoryStore, Outcome, Run, idempotent};
use serde::{Deserialize, Serialize};

use crate::provider::{PayError, Provider, Refund};
use crate::refund::run;

#[idempotent(key = "<run>:refund:<order_id>", wait = "20ms")]
async fn refund_waiting_briefly(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    provider.refund(order_id, 42).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_past_the_wait_deadline_is_told_the_action_is_in_progress() {
    let run = run("wait");
    let provider = Provider::gated();
    let first = tokio::spawn({
        let (run, provider) = (run.clone(), Arc::clone(&provider));
        async move { refund_waiting_briefly(run, "1182".into(), provider).await }
    });
    provider.entered.notified().await;

    let second = refund_waiting_briefly(run.clone(), "1182".into(), Arc::clone(&provider)).await;
    assert!(matches!(
        second,
        Err(PayError::Idempotency(Error::InProgress { .. }))
    ));
    provider.open();
    assert!(
        first
            .await
            .expect("no panic")
            .expect("first succeeds")
            .is_fresh()
    );
    assert_eq!(provider.calls(), 1, "the duplicate never ran");
}

#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
enum CardError {
    #[error("declined")]
    Declined,
    #[error("{0}")]
    Idempotency(String),
}

impl From<Error> for CardError {
    fn from(err: Error) -> CardError {
        CardError::Idempotency(err.to_string())
    }
}

#[idempotent(
    key = "<run>:charge:<order_id>",
    record_errors,
    note = "This card was already charged for the order."
)]
async fn charge(
    run: Run,
    order_id: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, CardError> {
    provider
        .refund(order_id, 42)
        .await
        .map_err(|_| CardError::Declined)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_record_errors_a_declined_charge_is_final_and_not_retried() {
    let run = run("record-errors");
    let provider = Provider::new();
    provider.fail_next.store(true, Ordering::SeqCst);
    let first = charge(run.clone(), "1182".into(), Arc::clone(&provider)).await;
    let again = charge(run.clone(), "1182".into(), Arc::clone(&provider)).await;
    assert_eq!(first, Err(CardError::Declined));
    assert_eq!(
        again,
        Err(CardError::Declined),
        "the recorded error comes back"
    );
    assert_eq!(provider.calls(), 1, "a final error is not retried");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_carries_the_tools_own_note() {
    let run = run("note");
    let provider = Provider::new();
    let first = charge(run.clone(), "1182".into(), Arc::clone(&provider))
        .await
        .expect("first charge succeeds");
    assert!(first.is_fresh());
    let again = charge(run.clone(), "1182".into(), Arc::clone(&provider))
        .await
        .expect("the repeat succeeds");
    assert_eq!(
        again.note(),
        Some("This card was already charged for the order.")
    );
    assert_eq!(provider.calls(), 1);
}

struct Shop {
    store: Arc<MemoryStore>,
    provider: Arc<Provider>,
}

impl Shop {
    fn new(provider: &Arc<Provider>) -> Shop {
        Shop {
            store: Arc::new(MemoryStore::new()),
            provider: Arc::clone(provider),
        }
    }

    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store)]
    async fn refund(&self, run: Run, order_id: String) -> Result<Outcome<Refund>, PayError> {
        self.provider.refund(order_id, 42).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_site_store_keeps_its_own_records() {
    let run = run("store");
    let provider = Provider::new();
    let (east, west) = (Shop::new(&provider), Shop::new(&provider));
    assert!(
        east.refund(run.clone(), "1182".into())
            .await
            .expect("east")
            .is_fresh()
    );
    assert!(
        east.refund(run.clone(), "1182".into())
            .await
            .expect("east again")
            .is_replay()
    );
    assert!(
        west.refund(run.clone(), "1182".into())
            .await
            .expect("west")
            .is_fresh(),
        "another store has no record of the first refund"
    );
    assert_eq!(provider.calls(), 2);
}
