// An argument is free text, a call id or context, never two of them; and the
// markers take no arguments and do not go on `self`.
use idempotent_tools::{Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

struct Payments;

impl Payments {
    #[idempotent(key = "<run>:refund:<order_id>")]
    async fn refund_order(
        #[context] &self,
        run: Run,
        order_id: String,
        #[free_text]
        #[call_id]
        note: String,
        #[context(rig)] ctx: u8,
    ) -> Result<Outcome<u64>, PayError> {
        let _ = (note, ctx);
        Ok(0)
    }
}

fn main() {}
