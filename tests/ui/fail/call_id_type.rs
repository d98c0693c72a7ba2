// A call id is recognised by its type (`CallId`), by the `#[call_id]` marker,
// and through a field path ending in `call_id`; none may be keyed on.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

use idempotent_tools::CallId;
use serde::Serialize;

#[derive(Serialize)]
struct Meta {
    call_id: String,
}

#[idempotent(key = "<run>:refund:<id>")]
async fn by_type(run: Run, id: CallId) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

#[idempotent(key = "<run>:refund:<id>")]
async fn by_marker(run: Run, #[call_id] id: String) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

#[idempotent(key = "<run>:refund:<meta.call_id>")]
async fn by_field(run: Run, meta: Meta) -> Result<Outcome<u64>, PayError> {
    Ok(0)
}

fn main() {}
