//! Claims that end without a result, or that cannot be had: an error, a
//! panic or a dropped future releases the claim so a retry acts; waiters
//! take over once; a key used inside its own action fails at once; a
//! duplicate past its wait is told the call is in progress.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::Case;
use super::case::case;
use super::kit::{
    CountingProvider, Ends, Holder, RefundError, Refunded, fresh_run, refund_call, refunds, within,
};
use idempotent_tools::{Error, store::Store};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(an_error_releases_the_claim_and_a_retry_acts, []),
        case!(waiters_take_over_once_when_the_holder_fails, []),
        case!(a_panic_releases_the_claim, []),
        case!(a_future_dropped_by_timeout_releases_the_claim, []),
        case!(a_future_dropped_by_select_releases_the_claim, []),
        case!(using_a_key_inside_its_own_action_fails_at_once, []),
        case!(a_duplicate_past_the_wait_deadline_is_in_progress, []),
    ]
}

async fn an_error_releases_the_claim_and_a_retry_acts(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let failed = refund_call(&store, &run, "1182", 42)
        .run(async {
            provider.refund("1182", 42);
            Err::<Refunded, _>(RefundError::Declined("network".into()))
        })
        .await;
    assert!(matches!(failed, Err(RefundError::Declined(_))));
    let retry = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("retry");
    assert!(retry.is_fresh(), "the retry after an error must act");
    assert_eq!(provider.refunds(), 2);
}

async fn waiters_take_over_once_when_the_holder_fails(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42),
        provider.clone(),
        Ends::Failing,
    )
    .await;
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
            tokio::spawn(async move {
                refund_call(&store, &run, "1182", 42)
                    .run(refunds(&provider, 42))
                    .await
            })
        })
        .collect();
    let held = holder.finish().await;
    assert!(matches!(held, Err(RefundError::Declined(_))));
    let mut fresh = 0;
    for waiter in waiters {
        let outcome = within("a waiter", waiter)
            .await
            .expect("task")
            .expect("outcome");
        fresh += usize::from(outcome.is_fresh());
    }
    assert_eq!(fresh, 1, "exactly one waiter takes over");
    assert_eq!(
        provider.refunds(),
        1,
        "the failed holder never reached the provider"
    );
}

async fn a_panic_releases_the_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let panicked = {
        let (store, run) = (store.clone(), run.clone());
        tokio::spawn(async move {
            refund_call(&store, &run, "1182", 42)
                .run(async { crash::<Refunded>() })
                .await
        })
    };
    let joined = within("the panicking call", panicked).await;
    assert!(joined.expect_err("must panic").is_panic());
    let retry = within(
        "the retry after a panic",
        refund_call(&store, &run, "1182", 42).run(refunds(&provider, 42)),
    )
    .await
    .expect("retry");
    assert!(retry.is_fresh(), "a panic must release the claim");
    assert_eq!(provider.refunds(), 1);
}

/// A tool that panics mid-action. It unwinds without the panic hook, so a
/// passing run prints no panic for it.
fn crash<T>() -> Result<T, RefundError> {
    std::panic::resume_unwind(Box::new("the tool crashed mid-action"))
}

async fn a_future_dropped_by_timeout_releases_the_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let entered = Notify::new();
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        refund_call(&store, &run, "1182", 42).run(async {
            entered.notify_one();
            std::future::pending::<Result<Refunded, RefundError>>().await
        }),
    )
    .await;
    assert!(dropped.is_err(), "the call must have been cut off");
    let retry = within(
        "the retry after a timeout",
        refund_call(&store, &run, "1182", 42).run(refunds(&provider, 42)),
    )
    .await
    .expect("retry");
    assert!(retry.is_fresh(), "a dropped future must release the claim");
    assert_eq!(provider.refunds(), 1);
}

async fn a_future_dropped_by_select_releases_the_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = CountingProvider::default();
    let entered = Notify::new();
    let call = refund_call(&store, &run, "1182", 42).run(async {
        entered.notify_one();
        std::future::pending::<Result<Refunded, RefundError>>().await
    });
    tokio::select! {
        _ = call => panic!("the action never finishes"),
        () = entered.notified() => {}
    }
    let retry = within(
        "the retry after select! dropped the call",
        refund_call(&store, &run, "1182", 42).run(refunds(&provider, 42)),
    )
    .await
    .expect("retry");
    assert!(retry.is_fresh());
    assert_eq!(provider.refunds(), 1);
}

async fn using_a_key_inside_its_own_action_fails_at_once(store: Arc<dyn Store>) {
    let run = fresh_run();
    let inner_store = store.clone();
    let inner_run = run.clone();
    let outer = within(
        "the re-entrant call",
        refund_call(&store, &run, "1182", 42).run(async move {
            let inner = refund_call(&inner_store, &inner_run, "1182", 42)
                .run(async { Ok::<_, RefundError>(0u32) })
                .await;
            let reentrant =
                matches!(&inner, Err(err) if matches!(err.guard(), Some(Error::Reentrant { .. })));
            Ok::<bool, RefundError>(reentrant)
        }),
    )
    .await
    .expect("outer");
    assert_eq!(
        outer.into_value(),
        Some(true),
        "the inner call must fail with Reentrant"
    );
}

async fn a_duplicate_past_the_wait_deadline_is_in_progress(store: Arc<dyn Store>) {
    let run = fresh_run();
    let provider = Arc::new(CountingProvider::default());
    let holder = Holder::start(
        refund_call(&store, &run, "1182", 42),
        provider.clone(),
        Ends::Refunding,
    )
    .await;
    let late = refund_call(&store, &run, "1182", 42)
        .wait(Duration::from_millis(100))
        .run(refunds(&provider, 42))
        .await;
    match late {
        Err(err) => assert!(
            matches!(err.guard(), Some(Error::InProgress { .. })),
            "{err:?}"
        ),
        Ok(outcome) => panic!("expected InProgress, got {outcome:?}"),
    }
    let _ = holder.finish().await.expect("first");
    assert_eq!(provider.refunds(), 1);
}
