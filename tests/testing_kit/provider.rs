//! The stand-in provider: it keeps the first refund under a key (unless it
//! ignores keys), counts each order's refunds, can lose a reply or fail a
//! call once it acted, answers lookups that can lag, and yields as a
//! network would.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotent_tools::{Classify, Failure};
use idempotent_tools_testing::{Lag, Provider, ProviderError};

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

#[tokio::test]
async fn a_provider_that_ignores_keys_refunds_every_call_and_notes_the_key() {
    let provider = Provider::with_delay(Duration::ZERO).ignoring_keys();
    let shared = provider.clone();
    let first = provider.refund("1182", 42, Some("k")).await;
    let again = shared.refund("1182", 42, Some("k")).await;
    assert_ne!(first, again, "a clone ignores keys too");
    assert_eq!(provider.refunds_of("1182"), 2);
    let keys: Vec<_> = provider.received().into_iter().map(|r| r.key).collect();
    assert_eq!(keys, [Some("k".into()), Some("k".into())]);
}

#[tokio::test]
async fn a_failed_call_made_its_refund_on_its_order_only_and_may_have_acted() {
    let provider = Provider::with_delay(Duration::ZERO);
    provider.fail_next_call("1182", ProviderError::ConnectionDropped);
    provider.fail_next_call("1183", ProviderError::ReplyLost);
    assert!(
        provider.refund("1184", 42, None).await.is_ok(),
        "another order"
    );
    assert_eq!(
        provider.refund("1183", 42, None).await,
        Err(ProviderError::ReplyLost)
    );
    assert_eq!(
        provider.refund("1182", 42, Some("k")).await,
        Err(ProviderError::ConnectionDropped)
    );
    assert_eq!(provider.refunds_on_file(), 3, "each failed call acted");
    let retried = provider.refund("1182", 42, Some("k")).await;
    assert_eq!(
        retried.map(|r| r.id),
        Ok("re_3".to_owned()),
        "the kept refund"
    );
    for error in [ProviderError::ConnectionDropped, ProviderError::ReplyLost] {
        assert_eq!(error.failure(), Failure::Unknown, "{error}");
    }
}

#[tokio::test]
async fn a_lookup_that_lags_by_lookups_misses_each_new_refund_that_many_times() {
    let provider = Provider::with_delay(Duration::ZERO).with_lookup_lag(Lag::lookups(1));
    assert_eq!(provider.refund_of("1182").await, None, "nothing made");
    let first = provider.refund("1182", 42, None).await.expect("a refund");
    provider.refund("1183", 42, None).await.expect("a refund");
    assert_eq!(provider.refund_of("1182").await, None, "missed once");
    assert_eq!(provider.refund_of("1182").await, Some(first.clone()));
    provider
        .refund("1182", 42, None)
        .await
        .expect("a second refund");
    assert_eq!(
        provider.refund_of("1182").await,
        Some(first),
        "the first refund made, found while the second is missed"
    );
    assert_eq!(provider.refund_of("1183").await, None, "its own miss");
    assert_eq!(provider.lookups_received(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_lookup_that_lags_by_time_finds_a_refund_once_the_time_passed() {
    let provider =
        Provider::with_delay(Duration::ZERO).with_lookup_lag(Lag::time(Duration::from_secs(5)));
    let made = provider.refund("1182", 42, None).await.expect("a refund");
    assert_eq!(provider.refund_of("1182").await, None);
    tokio::time::advance(Duration::from_secs(4)).await;
    assert_eq!(provider.refund_of("1182").await, None, "4 s after");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(provider.refund_of("1182").await, Some(made), "5 s after");
}
