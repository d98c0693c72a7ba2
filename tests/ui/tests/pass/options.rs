//! Every option, together.

use std::sync::Arc;

use idempotent_tools::{MemoryStore, Outcome, Run, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize)]
enum PayError {
    #[error("idempotency: {0}")]
    Idempotency(String),
    #[error("declined")]
    Declined,
}

impl From<idempotent_tools::Error> for PayError {
    fn from(err: idempotent_tools::Error) -> PayError {
        PayError::Idempotency(err.to_string())
    }
}

#[idempotent(
    key = "<run>:charge:<order_id>",
    store = store.clone(),
    retention = "7d",
    wait = "30s",
    lease = "500ms",
    record_errors,
    takeover = "report_unknown",
    note = "This card was already charged; nothing more to do.",
    conflict_note = "A charge with other details stands; ask the user first.",
    tool = "shop::charge",
)]
async fn charge(
    run: Run,
    order_id: u64,
    usd: u64,
    #[context] store: Arc<MemoryStore>,
) -> Result<Outcome<u64>, PayError> {
    if usd > 100 {
        return Err(PayError::Declined);
    }
    Ok(usd)
}

#[tokio::test(flavor = "current_thread")]
async fn options_builds_and_runs() -> Result<(), PayError> {
    let run = Run::new("options-1").map_err(idempotent_tools::Error::from)?;
    let store = Arc::new(MemoryStore::new());
    let first = charge(run.clone(), 1, 42, store.clone()).await?;
    assert!(first.is_fresh());
    let again = charge(run.clone(), 1, 42, store.clone()).await?;
    assert_eq!(
        again.note(),
        Some("This card was already charged; nothing more to do.")
    );
    let other = charge(run.clone(), 1, 41, store.clone()).await?;
    assert_eq!(
        other.note(),
        Some("A charge with other details stands; ask the user first.")
    );
    // A final error is recorded: the duplicate gets it back.
    assert!(matches!(
        charge(run.clone(), 2, 500, store.clone()).await,
        Err(PayError::Declined)
    ));
    assert!(matches!(
        charge(run, 2, 500, store).await,
        Err(PayError::Declined)
    ));
    Ok(())
}
