//! The expansion's own names never collide with the user's: arguments may
//! be called `key`, `store`, `guard`, `call`, `__x`, or even the internal
//! names themselves.

use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:k:<key>")]
#[allow(clippy::too_many_arguments)]
async fn keyed(
    run: Run,
    key: String,
    store: u32,
    guard: u32,
    call: u32,
    __x: u32,
    __idempotent_call: u32,
    __idempotent_key: u32,
    __idempotent_error: u32,
) -> Result<Outcome<String>, PayError> {
    Ok(format!(
        "{key}:{}",
        store + guard + call + __x + __idempotent_call + __idempotent_key + __idempotent_error
    ))
}

#[tokio::test(flavor = "current_thread")]
async fn hygiene_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("hygiene-1")?;
    let outcome = keyed(run, "a".into(), 1, 2, 3, 4, 5, 6, 7).await?;
    assert_eq!(outcome.into_value().as_deref(), Some("a:28"));
    Ok(())
}
