//! A counter from code: a second refund of one order in one run, approved
//! through the tool context, which the model never sees.

use idempotent_tools::rig::run_of;
use idempotent_tools::{Outcome, Run, idempotent};
use idempotent_tools_testing::{Provider, Refund};
use rig_core::tool::{ContextValue, Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tools::{RefundArgs, refund_parameters};
use crate::frameworks_common::{ShopError, provider_key};

/// Which refund of an order a prompt may make: 1, or 2 once the application
/// has approved a second one. It travels in the tool context, which the
/// application fills in and the model never sees, so no wording of the
/// model's can move it.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct RefundNo(pub u32);

impl ContextValue for RefundNo {
    const KEY: &'static str = "shop.refund_no";
}

#[idempotent(key = "<run>:refund:<order_id>:<refund_no>")]
async fn refund_numbered(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    refund_no: u32,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, reason);
    Ok(provider
        .refund(&order_id, usd, provider_key().as_deref())
        .await?)
}

/// Every argument of a rig tool is the model's; the counter comes from the
/// context.
pub struct NumberedRefund {
    pub provider: Provider,
}

impl Tool for NumberedRefund {
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
        let refund_no = context.get::<RefundNo>().ok().flatten().map_or(1, |n| n.0);
        let provider = &self.provider;
        refund_numbered(
            provider,
            &run,
            args.order_id,
            refund_no,
            args.usd,
            args.reason,
        )
        .await
    }
}
