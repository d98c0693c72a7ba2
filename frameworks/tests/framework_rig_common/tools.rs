//! The refund tools the rig tests give an agent, in every way rig makes
//! one: `#[rig_tool]` below and above `#[idempotent]`, and hand-written
//! `Tool`s that delegate to an annotated function.

use std::sync::LazyLock;

use idempotent_tools::rig::run_of;
use idempotent_tools::{Outcome, Run, idempotent};
use idempotent_tools_testing::{Provider, Refund};
use rig_core::rig_tool;
use rig_core::tool::{Tool, ToolContext};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::frameworks_common::{ShopError, provider_key};

/// Shared by the two `#[rig_tool]` functions, which have no state of their
/// own. Each test refunds its own order, so they never count each other's.
pub static PROVIDER: LazyLock<Provider> = LazyLock::new(Provider::default);

// `#[rig_tool]` above `#[idempotent]`: rig reads the function first, then
// the guard rewrites its body.
#[rig_tool(
    name = "refund",
    description = "Refund an order",
    params(
        order_id = "The order to refund",
        usd = "Dollars to refund",
        reason = "Why"
    )
)]
#[idempotent(key = "<run>:refund:<order_id>")]
pub async fn refund_below(
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = reason;
    Ok(PROVIDER
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

// `#[idempotent]` above `#[rig_tool]`: the guard rewrites the body and keeps
// the signature, which rig then reads.
#[idempotent(key = "<run>:refund:<order_id>")]
#[rig_tool(
    name = "refund",
    description = "Refund an order",
    params(
        order_id = "The order to refund",
        usd = "Dollars to refund",
        reason = "Why"
    )
)]
pub async fn refund_above(
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = reason;
    Ok(PROVIDER
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

/// A hand-written rig tool, delegating to an annotated function that takes
/// the run as an argument.
pub struct RefundOrder {
    pub provider: Provider,
}

/// The refund tool's arguments, as the model gives them.
#[derive(Deserialize)]
pub struct RefundArgs {
    pub order_id: String,
    pub usd: u64,
    pub reason: String,
}

/// The JSON schema of [`RefundArgs`], shared by the hand-written tools.
pub fn refund_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order_id": { "type": "string" },
            "usd": { "type": "integer" },
            "reason": { "type": "string" }
        },
        "required": ["order_id", "usd", "reason"]
    })
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, reason);
    Ok(provider
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

impl Tool for RefundOrder {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Outcome<Refund>;
    type Error = ShopError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Outcome<Refund>, ShopError> {
        let run = run_of(context)?;
        refund_order(&self.provider, &run, args.order_id, args.usd, args.reason).await
    }
}

/// The same hand-written tool with no guard: what most tools look like.
pub struct UnguardedRefund {
    pub provider: Provider,
}

impl Tool for UnguardedRefund {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Refund;
    type Error = ShopError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(&self, _: &mut ToolContext, args: RefundArgs) -> Result<Refund, ShopError> {
        Ok(self.provider.refund(&args.order_id, args.usd, None).await?)
    }
}

/// A hand-written tool whose annotated function reads `<run>` from the run
/// scope, which `InRun` enters from the tool context.
pub struct RefundOrderInRun {
    pub provider: Provider,
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_in_scope(
    #[context] provider: &Provider,
    order_id: String,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = reason;
    Ok(provider
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

impl Tool for RefundOrderInRun {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = Outcome<Refund>;
    type Error = ShopError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        refund_parameters()
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Outcome<Refund>, ShopError> {
        refund_in_scope(&self.provider, args.order_id, args.usd, args.reason).await
    }
}
