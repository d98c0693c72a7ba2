//! The tool most cases call: a refund keyed on the run and the order, with
//! the model's reason as free text.

use std::sync::Arc;

use idempotent_tools::{Outcome, Run, idempotent};

use crate::provider::{PayError, Provider, Refund};

#[idempotent(key = "<run>:refund:<order_id>")]
pub async fn refund_order(
    run: Run,
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
    #[context] provider: Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    let _ = reason;
    provider.refund(order_id, usd).await
}

/// A run of the case's own, unique to this process.
pub fn run(name: &str) -> Run {
    Run::new(format!("{name}-{}", std::process::id())).expect("a run id is not empty")
}

/// Calls [`refund_order`] as a tool would, with one wording of the reason.
pub async fn refund(
    run: &Run,
    order_id: &str,
    usd: u64,
    provider: &Arc<Provider>,
) -> Result<Outcome<Refund>, PayError> {
    refund_order(
        run.clone(),
        order_id.to_owned(),
        usd,
        "customer asked".to_owned(),
        Arc::clone(provider),
    )
    .await
}
