//! How a row is played: the model against one version of the tool, and
//! what the provider counted.

use std::future::Future;

use idempotent_tools::CallId;
use idempotent_tools_testing::{Runner, ScriptedModel, Tools, Transcript};
use serde::Serialize;

use super::shop::{PayError, RefundArgs, Shop};

/// What one row came to: the provider's counts, and what the model saw.
pub struct Attempt {
    pub refunds_on_file: usize,
    pub calls_received: usize,
    pub transcript: Transcript,
}

/// Plays `model` against one version of the tool, with a fresh shop behind it.
pub async fn attempt<F, Fut, T>(runner: &Runner, model: ScriptedModel, version: F) -> Attempt
where
    F: Fn(Shop, RefundArgs, CallId) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, PayError>> + Send + 'static,
    T: Serialize,
{
    attempt_in(Shop::default(), runner, model, version).await
}

/// Plays `model` against one version of the tool, with `shop` behind it.
pub async fn attempt_in<F, Fut, T>(
    shop: Shop,
    runner: &Runner,
    model: ScriptedModel,
    version: F,
) -> Attempt
where
    F: Fn(Shop, RefundArgs, CallId) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, PayError>> + Send + 'static,
    T: Serialize,
{
    let transcript = runner.run(model, &tools(&shop, version)).await;
    Attempt {
        refunds_on_file: shop.provider.refunds_on_file(),
        calls_received: shop.provider.calls_received(),
        transcript,
    }
}

/// The one tool the model can call, `refund_order`, as `version`, with `shop` behind it.
pub fn tools<F, Fut, T>(shop: &Shop, version: F) -> Tools
where
    F: Fn(Shop, RefundArgs, CallId) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, PayError>> + Send + 'static,
    T: Serialize,
{
    let shop = shop.clone();
    Tools::new().tool("refund_order", move |args, call| {
        version(shop.clone(), args, call)
    })
}
