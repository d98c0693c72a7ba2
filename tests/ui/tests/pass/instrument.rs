//! `#[tracing::instrument]` stacks with `#[idempotent]` in either order,
//! with and without `err` and `ret`, on free functions and methods.

use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[tracing::instrument]
#[idempotent(key = "<run>:refund:<order_id>")]
async fn above(run: Run, order_id: u64) -> Result<Outcome<u64>, PayError> {
    Ok(order_id)
}

#[tracing::instrument(err, ret)]
#[idempotent(key = "<run>:refund:<order_id>")]
async fn above_with_events(run: Run, order_id: u64) -> Result<Outcome<u64>, PayError> {
    if order_id == 0 {
        return Err(idempotent_tools::Error::MissingRun.into());
    }
    Ok(order_id)
}

#[idempotent(key = "<run>:refund:<order_id>")]
#[tracing::instrument(err)]
async fn below(run: Run, order_id: u64) -> Result<Outcome<u64>, PayError> {
    Ok(order_id)
}

#[derive(Debug)]
struct Shop;

impl Shop {
    #[tracing::instrument(skip(self))]
    #[idempotent(key = "<run>:refund:<order_id>")]
    async fn refund(&self, run: Run, order_id: u64) -> Result<Outcome<u64>, PayError> {
        Ok(order_id)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn instrument_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("instrument-1")?;
    assert!(above(run.clone(), 1).await?.is_fresh());
    assert!(above_with_events(run.clone(), 2).await?.is_fresh());
    assert!(below(run.clone(), 3).await?.is_fresh());
    assert!(Shop.refund(run, 4).await?.is_fresh());
    Ok(())
}
