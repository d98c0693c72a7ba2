//! A return type written through an alias is read by its meaning, not its
//! spelling: `anyhow`-style `Result<T>` aliases work.

use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

type Result<T, E = PayError> = std::result::Result<T, E>;
type ToolResult<T> = Result<Outcome<T>>;

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund(run: Run, order_id: u64) -> Result<Outcome<u64>> {
    Ok(order_id)
}

#[idempotent(key = "<run>:cancel:<order_id>")]
async fn cancel(run: Run, order_id: u64) -> ToolResult<u64> {
    Ok(order_id)
}

#[tokio::test(flavor = "current_thread")]
async fn aliases_builds_and_runs() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("aliases-1")?;
    assert!(refund(run.clone(), 7).await?.is_fresh());
    assert!(cancel(run.clone(), 7).await?.is_fresh());
    assert!(cancel(run, 7).await?.is_replay());
    Ok(())
}
