// An argument typed `FreeText<_>` is free text without a marker: it may not
// be keyed on either.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

use idempotent_tools::FreeText;

#[idempotent(key = "<run>:email:<body>")]
async fn send_email(
    run: Run,
    to: String,
    body: FreeText<String>,
) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
