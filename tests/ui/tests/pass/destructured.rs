//! Destructured parameters and field paths: a framework's `Parameters`
//! wrapper, tuples, and `<args.order_id>`.

use idempotent_tools::{Outcome, Run, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// The shape of rmcp's `Parameters<T>`.
struct Parameters<T>(T);

#[derive(Clone, Serialize, Deserialize)]
struct RefundArgs {
    order_id: String,
    usd: u64,
    reason: String,
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund(
    run: Run,
    Parameters(RefundArgs { order_id, usd, .. }): Parameters<RefundArgs>,
) -> Result<Outcome<u64>, PayError> {
    let _ = order_id;
    Ok(usd)
}

#[idempotent(key = "<run>:refund:<args.order_id>")]
async fn refund_by_field(run: Run, args: RefundArgs) -> Result<Outcome<u64>, PayError> {
    Ok(args.usd)
}

#[idempotent(key = "<run>:move:<from>:<to>")]
async fn transfer(run: Run, (from, to): (u32, u32), &usd: &u64) -> Result<Outcome<u64>, PayError> {
    Ok(u64::from(from + to) + usd)
}

#[idempotent(key = "<run>:pair:<pair.0>:<pair.1>")]
async fn pair(run: Run, pair: (u32, u32)) -> Result<Outcome<u32>, PayError> {
    Ok(pair.0 + pair.1)
}

fn args(usd: u64) -> Parameters<RefundArgs> {
    Parameters(RefundArgs {
        order_id: "1182".into(),
        usd,
        reason: "damaged".into(),
    })
}

#[tokio::test(flavor = "current_thread")]
async fn destructured_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("destructured-1")?;
    assert!(refund(run.clone(), args(42)).await?.is_fresh());
    assert!(refund(run.clone(), args(42)).await?.is_replay());
    // `usd` is bound, so fingerprinted: another amount is a conflict.
    assert!(refund(run.clone(), args(41)).await?.is_conflict());

    let run = Run::new("destructured-2")?;
    assert!(refund_by_field(run.clone(), args(42).0).await?.is_fresh());
    assert!(
        refund_by_field(run.clone(), args(41).0)
            .await?
            .is_conflict()
    );
    assert!(transfer(run.clone(), (1, 2), &5).await?.is_fresh());
    assert!(transfer(run.clone(), (1, 2), &6).await?.is_conflict());
    assert!(pair(run, (1, 2)).await?.is_fresh());
    Ok(())
}
