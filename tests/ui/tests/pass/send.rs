//! The guarded future is `Send` whenever the body's is, even when an
//! argument is `Send` but not `Sync`: the expansion holds no borrow of the
//! arguments across an `.await`.

use std::cell::Cell;

use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:count:<order_id>")]
async fn count(run: Run, order_id: u64, hits: Cell<u32>) -> Result<Outcome<u32>, PayError> {
    tokio::task::yield_now().await;
    hits.set(hits.get() + 1);
    Ok(hits.get())
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::test(flavor = "multi_thread")]
async fn send_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("send-1")?;
    let task = tokio::spawn(assert_send(count(run, 7, Cell::new(1))));
    let outcome = task.await.expect("the task does not panic")?;
    assert_eq!(outcome.into_value(), Some(2));
    Ok(())
}
