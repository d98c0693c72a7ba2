//! The refund and the receipt behind `cached`'s `#[cached]`, keyed as the
//! guard keys them (`<run>:refund:<order_id>`, built with `format!`): the
//! peer the replay, steady-state, allocation and instruction benches compare
//! with. Each bench binary has its own caches.

use cached::proc_macro::cached;
use idempotent_tools::Run;

use crate::{Provider, Receipt, Refund, RefundError, plain_key, refund};

/// The refund, cached: every repeat of an order is a hit.
#[cached(
    max_size = 10_000,
    key = "String",
    convert = r#"{ plain_key(run, order_id) }"#
)]
pub async fn refund_cached(
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Refund, RefundError> {
    // The run is part of the cache key only.
    let _ = run;
    refund(provider, order_id, usd).await
}

/// The receipt, which owns a `String`, cached.
#[cached(
    max_size = 10_000,
    key = "String",
    convert = r#"{ plain_key(run, order_id) }"#
)]
pub async fn receipt_cached(
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Receipt, RefundError> {
    let _ = run;
    Ok(provider.receipt(order_id, usd).await)
}

/// The refund, cached as large as the steady-state store (100,000
/// entries), for its miss path: each new order evicts the oldest.
#[cached(
    max_size = 100_000,
    key = "String",
    convert = r#"{ plain_key(run, order_id) }"#
)]
pub async fn refund_cached_miss(
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Refund, RefundError> {
    let _ = run;
    refund(provider, order_id, usd).await
}
