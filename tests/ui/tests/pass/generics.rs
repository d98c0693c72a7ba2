//! Generic parameters, `impl Trait` arguments, lifetimes and where clauses.

use std::fmt::Debug;

use idempotent_tools::{KeyPart, Outcome, Run, idempotent};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund<T>(
    run: Run,
    order_id: impl KeyPart + Send,
    details: T,
) -> Result<Outcome<T>, PayError>
where
    T: Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static,
{
    Ok(details)
}

#[idempotent(key = "<run>:note:<id>")]
async fn note<'a, K: KeyPart + Sync + ?Sized>(
    run: &'a Run,
    id: &'a K,
    text: impl AsRef<str> + Serialize + Send,
) -> Result<Outcome<usize>, PayError> {
    Ok(text.as_ref().len())
}

#[tokio::test(flavor = "current_thread")]
async fn generics_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("generics-1")?;
    assert!(refund(run.clone(), 7u64, vec![1, 2]).await?.is_fresh());
    assert!(refund(run.clone(), 7u64, vec![1, 2]).await?.is_replay());
    assert!(refund(run.clone(), 7u64, vec![1]).await?.is_conflict());
    assert_eq!(note(&run, "order-7", "hello").await?.into_value(), Some(5));
    Ok(())
}
