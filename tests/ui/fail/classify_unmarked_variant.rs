// A variant with no field has nothing to delegate to: whether the action
// may have taken effect must be said, never guessed.
use idempotent_tools::Classify;

#[derive(Debug, thiserror::Error, Classify)]
enum RefundError {
    #[error("the card was declined")]
    Declined,
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

fn main() {}
