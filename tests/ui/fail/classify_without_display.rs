// An error that classifies is recorded with its text when the outcome is
// unknown, for the operator: it needs `Display`.
use idempotent_tools::{Classify, Failure, Outcome, Run, idempotent};

#[derive(Debug)]
enum RefundError {
    TimedOut,
    Idempotency(idempotent_tools::Error),
}

impl From<idempotent_tools::Error> for RefundError {
    fn from(err: idempotent_tools::Error) -> Self {
        RefundError::Idempotency(err)
    }
}

impl Classify for RefundError {
    fn failure(&self) -> Failure {
        Failure::Unknown
    }
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund(run: Run, order_id: String) -> Result<Outcome<u64>, RefundError> {
    Err(RefundError::TimedOut)
}

fn main() {}
