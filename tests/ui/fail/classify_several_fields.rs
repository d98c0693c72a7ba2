// A variant of several fields has no one field to delegate to, so it
// must be marked.
use idempotent_tools::Classify;

#[derive(Debug, thiserror::Error, Classify)]
enum RefundError {
    #[error("the provider answered {0} for order {1}")]
    Refused(u16, String),
}

fn main() {}
