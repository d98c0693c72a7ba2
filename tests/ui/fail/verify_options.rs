// `verify` names a function; `takeover = "verify"` and `settle` need one
// to ask; and a transaction has nothing to ask the provider about.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum RefundError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[idempotent(key = "<run>:refund:<order_id>", verify = "find_refund")]
async fn named_by_string(run: Run, order_id: String) -> Result<Outcome<u64>, RefundError> {
    Ok(1)
}

#[idempotent(key = "<run>:refund:<order_id>", takeover = "verify")]
async fn nothing_to_ask(run: Run, order_id: String) -> Result<Outcome<u64>, RefundError> {
    Ok(1)
}

#[idempotent(key = "<run>:refund:<order_id>", settle = "2s")]
async fn nothing_to_settle(run: Run, order_id: String) -> Result<Outcome<u64>, RefundError> {
    Ok(1)
}

#[idempotent(key = "<run>:refund:<order_id>", takeover = "verfy")]
async fn misspelt(run: Run, order_id: String) -> Result<Outcome<u64>, RefundError> {
    Ok(1)
}

struct Transaction;

struct Shop {
    db: (),
}

async fn find_credit(_key: idempotent_tools::call::Key) -> idempotent_tools::Verified<u64> {
    idempotent_tools::Verified::NotYet
}

impl Shop {
    #[idempotent(key = "<run>:credit:<order_id>", store = &self.db, transaction, verify = find_credit)]
    async fn issue_credit(
        &self,
        run: Run,
        order_id: String,
        #[transaction] tx: &Transaction,
    ) -> Result<Outcome<u64>, RefundError> {
        Ok(0)
    }
}

fn main() {}
