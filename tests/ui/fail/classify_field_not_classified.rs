// An unmarked variant of one field delegates to it, and a `String` does
// not say whether the action may have taken effect.
use idempotent_tools::Classify;

#[derive(Debug, thiserror::Error, Classify)]
enum RefundError {
    #[error("{0}")]
    Other(String),
}

fn main() {}
