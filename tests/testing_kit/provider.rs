//! The stand-in provider: it keeps the first refund under a key, counts each
//! order's refunds, can lose a reply, and yields as a network would.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotent_tools_testing::{Provider, ProviderError};

#[tokio::test]
async fn the_provider_keeps_the_first_refund_under_a_key() {
    let provider = Provider::with_delay(Duration::ZERO);
    let first = provider.refund("1182", 42, Some("k")).await;
    let again = provider.refund("1182", 42, Some("k")).await;
    let other = provider.refund("1183", 42, Some("k2")).await;
    assert_eq!(first, again);
    assert_ne!(first, other);
    assert_eq!(provider.refunds_on_file(), 2);
    assert_eq!(provider.calls_received(), 3);
    let keys: Vec<_> = provider.received().into_iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        [Some("k".into()), Some("k".into()), Some("k2".into())]
    );
}

#[tokio::test]
async fn the_provider_counts_the_refunds_of_each_order_apart() {
    let provider = Provider::with_delay(Duration::ZERO);
    provider.refund("1182", 42, Some("k")).await.ok();
    provider.refund("1182", 42, Some("k")).await.ok();
    provider.refund("1182", 42, None).await.ok();
    provider.refund("1183", 42, None).await.ok();
    assert_eq!(
        provider.refunds_of("1182"),
        2,
        "a repeat under a key is no refund"
    );
    assert_eq!(provider.refunds_of("1183"), 1);
    assert_eq!(provider.refunds_of("1184"), 0);
    assert_eq!(provider.refunds_on_file(), 3);
}

#[tokio::test]
async fn the_provider_refunds_every_call_without_a_key() {
    let provider = Provider::with_delay(Duration::ZERO);
    for _ in 0..3 {
        provider.refund("1182", 42, None).await.ok();
    }
    let ids: Vec<_> = provider.refunds().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["re_1", "re_2", "re_3"]);
}

#[tokio::test]
async fn a_lost_reply_still_made_the_refund_and_a_retry_under_the_key_gets_it() {
    let provider = Provider::with_delay(Duration::ZERO);
    provider.lose_next_reply();
    assert_eq!(
        provider.refund("1182", 42, Some("k")).await,
        Err(ProviderError::ReplyLost)
    );
    assert_eq!(provider.refunds_on_file(), 1);
    let retried = provider.refund("1182", 42, Some("k")).await;
    assert_eq!(retried.map(|r| r.id), Ok("re_1".to_owned()));
    assert_eq!(provider.refunds_on_file(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn the_providers_network_yields_even_with_no_delay() {
    let provider = Provider::with_delay(Duration::ZERO);
    let other_ran = Arc::new(AtomicUsize::new(0));
    let other = {
        let other_ran = Arc::clone(&other_ran);
        async move {
            other_ran.fetch_add(1, Ordering::SeqCst);
        }
    };
    let refund = async {
        provider.refund("1182", 42, None).await.ok();
        // Joined below after `refund`: it ran only if the provider yielded.
        other_ran.load(Ordering::SeqCst)
    };
    let (seen, ()) = tokio::join!(refund, other);
    assert_eq!(seen, 1);
}
