//! `&self` and `&mut self` methods: fields of `self` in the key, a store per
//! service, and futures that stay `Send`.

use std::sync::Arc;

use idempotent_tools::{MemoryStore, Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

struct Payments {
    tenant: String,
    store: Arc<MemoryStore>,
    refunds: u32,
}

impl Payments {
    /// Refunds an order of this tenant.
    #[idempotent(key = "<run>:<self.tenant>:refund:<order_id>", store = &self.store)]
    async fn refund(&self, run: Run, order_id: u64, usd: u64) -> Result<Outcome<u64>, PayError> {
        Ok(usd)
    }

    #[idempotent(key = "<run>:<self.tenant>:count:<order_id>", store = self.store.clone())]
    async fn count(&mut self, run: Run, order_id: u64) -> Result<Outcome<u32>, PayError> {
        self.refunds += 1;
        Ok(self.refunds)
    }

    #[idempotent(key = "<run>:consume:<order_id>")]
    async fn consume(self, run: Run, order_id: u64) -> Result<Outcome<String>, PayError> {
        Ok(self.tenant)
    }
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::test(flavor = "current_thread")]
async fn methods_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("methods-1")?;
    let mut payments = Payments {
        tenant: "acme".into(),
        store: Arc::new(MemoryStore::new()),
        refunds: 0,
    };
    assert!(
        assert_send(payments.refund(run.clone(), 7, 42))
            .await?
            .is_fresh()
    );
    assert!(payments.refund(run.clone(), 7, 42).await?.is_replay());
    assert_eq!(payments.count(run.clone(), 7).await?.into_value(), Some(1));
    assert_eq!(payments.count(run.clone(), 7).await?.into_value(), Some(1));
    assert_eq!(payments.refunds, 1);
    assert!(payments.consume(run, 7).await?.is_fresh());
    Ok(())
}
