//! A tool whose error derives `Classify`, with a verification, a settle
//! time and each takeover choice; a method's verification is given the key,
//! then a clone of its `Self`, then the arguments.
use std::sync::Arc;

use idempotent_tools::call::Key;
use idempotent_tools::{Classify, Outcome, Run, Verified, idempotent};

#[derive(Debug, thiserror::Error, Classify)]
enum RefundError {
    #[error("declined")]
    #[classify(definite)]
    Declined,
    #[error("timed out")]
    #[classify(unknown)]
    TimedOut,
    #[error("network")]
    Network(#[from] std::io::Error),
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

async fn find_refund(_key: Key, _run: Run, _order_id: String, usd: u64) -> Verified<u64> {
    Verified::Applied(usd)
}

#[idempotent(key = "<run>:refund:<order_id>", verify = find_refund, settle = "2s")]
async fn refund(run: Run, order_id: String, usd: u64) -> Result<Outcome<u64>, RefundError> {
    let _ = (run, order_id);
    if usd == 0 {
        return Err(RefundError::Declined);
    }
    if usd > 1000 {
        return Err(RefundError::TimedOut);
    }
    Ok(usd)
}

#[idempotent(key = "<run>:refund:<order_id>", verify = find_refund, takeover = "rerun")]
async fn refund_rerun(run: Run, order_id: String, usd: u64) -> Result<Outcome<u64>, RefundError> {
    let _ = (run, order_id);
    Ok(usd)
}

#[idempotent(key = "<run>:refund:<order_id>", takeover = "report_unknown")]
async fn refund_reported(run: Run, order_id: String) -> Result<Outcome<u64>, RefundError> {
    let _ = (run, order_id);
    Ok(1)
}

#[derive(Clone)]
struct Shop {
    ledger: Arc<Vec<u64>>,
}

impl Shop {
    /// The key, then a clone of the tool's `Self`, then its arguments.
    async fn find(_key: Key, shop: Shop, _run: Run, order_id: String) -> Verified<u64> {
        match order_id
            .parse::<usize>()
            .ok()
            .and_then(|i| shop.ledger.get(i))
        {
            Some(usd) => Verified::Applied(*usd),
            None => Verified::NotApplied,
        }
    }

    #[idempotent(key = "<run>:refund:<order_id>", verify = Shop::find, takeover = "verify")]
    async fn refund(&self, run: Run, order_id: String) -> Result<Outcome<u64>, RefundError> {
        let _ = (run, order_id);
        Ok(self.ledger.len() as u64)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn verify_builds_and_runs() {
    let run = Run::new("run-ui-verify").unwrap();
    assert!(
        refund(run.clone(), "1".into(), 42)
            .await
            .unwrap()
            .is_fresh()
    );
    assert!(
        refund_rerun(run.clone(), "2".into(), 42)
            .await
            .unwrap()
            .is_fresh()
    );
    assert!(
        refund_reported(run.clone(), "3".into())
            .await
            .unwrap()
            .is_fresh()
    );
    let shop = Shop {
        ledger: Arc::new(vec![7]),
    };
    assert!(shop.refund(run, "4".into()).await.unwrap().is_fresh());
}
