// `transaction` opens the transaction on the store's database, so it needs
// the store named.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum CreditError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// Stands in for the database's transaction: the rule is checked before
/// any type is.
struct Transaction;

struct Shop {
    db: (),
}

impl Shop {
    #[idempotent(key = "<run>:credit:<order_id>", transaction)]
    async fn issue_credit(
        &self,
        run: Run,
        order_id: String,
        #[transaction] tx: &Transaction,
    ) -> Result<Outcome<u64>, CreditError> {
        Ok(0)
    }
}

fn main() {}
