//! The versions of the tool: the usual ways to write it, then
//! `#[idempotent]`.

use idempotent_tools::{CallId, Outcome, idempotent};
use idempotent_tools_testing::Refund;
use serde::Serialize;

use super::RUN;
use super::shop::{PayError, RefundArgs, Shop};

/// What a version with its own check tells the model on a repeat.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Checked {
    Refunded(Refund),
    AlreadyRefunded { note: &'static str },
}

pub async fn no_key(shop: Shop, args: RefundArgs, _call: CallId) -> Result<Refund, PayError> {
    Ok(shop.provider.refund(&args.order_id, args.usd, None).await?)
}

pub async fn key_is_call_id(
    shop: Shop,
    args: RefundArgs,
    call: CallId,
) -> Result<Refund, PayError> {
    // The call id is new for every call the model makes.
    Ok(shop
        .provider
        .refund(&args.order_id, args.usd, Some(call.as_str()))
        .await?)
}

pub async fn key_is_run_and_order(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Refund, PayError> {
    // The same for every ask for this refund.
    let key = format!("{RUN}:refund:{}", args.order_id);
    Ok(shop
        .provider
        .refund(&args.order_id, args.usd, Some(&key))
        .await?)
}

pub async fn check_then_act(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Checked, PayError> {
    if shop.refunded().contains(&args.order_id) {
        return Ok(Checked::AlreadyRefunded {
            note: "already refunded",
        });
    }
    // While this call waits on the network, the other one runs the check above.
    let refund = shop.provider.refund(&args.order_id, args.usd, None).await?;
    shop.refunded().insert(args.order_id);
    Ok(Checked::Refunded(refund))
}

pub async fn claim_then_act(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Checked, PayError> {
    // Check and claim in one step, before the network: the other call finds the claim.
    if !shop.refunded().insert(args.order_id.clone()) {
        return Ok(Checked::AlreadyRefunded {
            note: "already refunded",
        });
    }
    Ok(Checked::Refunded(
        shop.provider.refund(&args.order_id, args.usd, None).await?,
    ))
}

impl Shop {
    /// Refunds once per run and order, however many times the model asks.
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store)]
    async fn refund_order(
        &self,
        order_id: String,
        usd: u64,
        // Worded anew on every ask, so kept out of the key and the fingerprint:
        // a reworded repeat is still the same refund. (The stand-in provider takes no reason.)
        #[free_text] _reason: String,
    ) -> Result<Outcome<Refund>, PayError> {
        // The guard's key, handed on: a retry after a lost answer is deduplicated there too.
        let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
        Ok(self.provider.refund(&order_id, usd, key.as_deref()).await?)
    }
}

/// `#[idempotent]`, called with the model's arguments.
pub async fn guarded(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Outcome<Refund>, PayError> {
    shop.refund_order(args.order_id, args.usd, args.reason)
        .await
}
