//! A provider that ignores keys, and a refund whose answer is lost on the
//! way back: the three ways a tool can take "I don't know if it happened".

use idempotent_tools::call::Key;
use idempotent_tools::records::{RecordQuery, Records, Resolution};
use idempotent_tools::{CallId, Classify, Outcome, Verified, idempotent};
use idempotent_tools_testing::{Provider, ProviderError, Refund, Runner, ScriptedModel};

use super::attempt::{Attempt, attempt_in};
use super::model::ask;
use super::shop::{PayError, RefundArgs, Shop};

/// The tool's error, classified: the provider's errors may come after it
/// acted, so they never release the claim.
#[derive(Debug, thiserror::Error, Classify)]
pub enum UnsureError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

impl From<UnsureError> for PayError {
    fn from(error: UnsureError) -> PayError {
        match error {
            UnsureError::Provider(error) => PayError::Provider(error),
            UnsureError::Idempotency(error) => PayError::Idempotency(error),
        }
    }
}

/// A shop whose provider ignores keys and loses its answer to the first refund.
pub fn shop_losing_the_answer() -> Shop {
    let shop = Shop::with_provider(Provider::new().ignoring_keys());
    shop.provider.lose_next_reply();
    shop
}

impl Shop {
    /// Asks the provider whether order `order_id` was refunded: the key,
    /// then the tool's `Self` and arguments (its free text left out).
    async fn find_refund(_key: Key, shop: Shop, order_id: String, _usd: u64) -> Verified<Refund> {
        match shop.provider.refund_of(&order_id).await {
            Some(refund) => Verified::Applied(refund),
            None => Verified::NotApplied,
        }
    }

    /// Asks the provider when a failure may have followed the refund.
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store, verify = Shop::find_refund)]
    async fn refund_verified(
        &self,
        order_id: String,
        usd: u64,
        #[free_text] _reason: String,
    ) -> Result<Outcome<Refund>, UnsureError> {
        Ok(self.provider.refund(&order_id, usd, None).await?)
    }

    /// Cannot ask: a failure that may have followed the refund is reported.
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store, takeover = "report_unknown")]
    async fn refund_reported(
        &self,
        order_id: String,
        usd: u64,
        #[free_text] _reason: String,
    ) -> Result<Outcome<Refund>, UnsureError> {
        Ok(self.provider.refund(&order_id, usd, None).await?)
    }
}

/// `refund_verified`, called with the model's arguments.
pub async fn verified(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Outcome<Refund>, PayError> {
    Ok(shop
        .refund_verified(args.order_id, args.usd, args.reason)
        .await?)
}

/// `refund_reported`, called with the model's arguments.
pub async fn reported(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Outcome<Refund>, PayError> {
    Ok(shop
        .refund_reported(args.order_id, args.usd, args.reason)
        .await?)
}

/// `model` against `refund_reported`; then an operator lists what is
/// pending, finds the refund at the provider and resolves the key with it;
/// then the model asks once more. Both attempts, in order.
pub async fn reported_then_resolved(
    shop: Shop,
    runner: &Runner,
    model: ScriptedModel,
) -> Result<[Attempt; 2], PayError> {
    let before = attempt_in(shop.clone(), runner, model, reported).await;
    let store_failed = |error| PayError::Idempotency(idempotent_tools::Error::from(error));
    let pending = shop
        .store
        .list(&RecordQuery::pending())
        .await
        .map_err(store_failed)?;
    for record in pending.records {
        if let Some(refund) = shop.provider.refund_of("1182").await {
            let applied = Resolution::applied(refund);
            shop.store
                .resolve(&record.key, applied)
                .await
                .map_err(store_failed)?;
        }
    }
    let again = ScriptedModel::new()
        .step([ask("call_c", 42, "still waiting")])
        .answer("Refunded order 1182.");
    let after = attempt_in(shop, runner, again, reported).await;
    Ok([before, after])
}
