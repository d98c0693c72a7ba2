// `verify` is given the key, then each argument by value, and answers with
// the tool's result: one that takes other arguments, or answers with
// another type, would never be called right.
use idempotent_tools::call::Key;
use idempotent_tools::{Outcome, Run, Verified, idempotent};

#[derive(Debug, thiserror::Error)]
enum RefundError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

async fn by_order(_key: Key, _order_id: String) -> Verified<u64> {
    Verified::NotYet
}

async fn of_another_type(_key: Key, _run: Run, _order_id: String, _usd: u64) -> Verified<String> {
    Verified::NotYet
}

#[idempotent(key = "<run>:refund:<order_id>", verify = by_order)]
async fn refund(run: Run, order_id: String, usd: u64) -> Result<Outcome<u64>, RefundError> {
    Ok(usd)
}

#[idempotent(key = "<run>:refund:<order_id>", verify = of_another_type)]
async fn refund_again(run: Run, order_id: String, usd: u64) -> Result<Outcome<u64>, RefundError> {
    Ok(usd)
}

fn main() {}
