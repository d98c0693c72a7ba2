//! rmcp over stdio with protocol 2026-07-28, whose clients open no session:
//! a connection served through `ConnectionRuns` is the run of its calls,
//! and a call that falls to the server-wide run is logged once. On its own
//! in this target, as the warning is said once per process.

mod framework_rmcp_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use framework_rmcp_common::{Protocol, Shop, call, connect, connect_own_run, refund, status};
use idempotent_tools_testing::Provider;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Counts the warnings that a call fell to the server-wide run.
struct ServerWideWarnings(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for ServerWideWarnings {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() == Level::WARN
            && meta.target() == "idempotent_tools"
            && meta.fields().iter().any(|field| field.name() == "run")
        {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_stdio_connection_is_its_own_run_and_the_server_wide_run_is_said_once() {
    let warnings = Arc::new(AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry().with(ServerWideWarnings(Arc::clone(&warnings)));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber here");

    // Two conversations, each a server process of its own on stdio, refund
    // the same order, naming no run: each gets its own refund, and a
    // repeat within one is a replay.
    let provider = Provider::default();
    let first = connect_own_run(Shop::new(provider.clone()), Protocol::Stateless).await;
    let second = connect_own_run(Shop::new(provider.clone()), Protocol::Stateless).await;
    let a = call(&first, refund("refund_order", "2190", "customer asked")).await;
    let b = call(&second, refund("refund_order", "2190", "customer asked")).await;
    let again = call(&first, refund("refund_order", "2190", "asked again")).await;
    assert_eq!(status(&a), Some("fresh"));
    assert_eq!(
        status(&b),
        Some("fresh"),
        "another connection is another run"
    );
    assert_eq!(status(&again), Some("replay"));
    assert_eq!(provider.refunds_of("2190"), 2);
    assert_eq!(
        warnings.load(Ordering::SeqCst),
        0,
        "no call fell server-wide"
    );

    // Served without it, both connections' calls fall to the server-wide
    // run: one refund, and one warning for all three calls.
    let first = connect(Shop::new(provider.clone()), Protocol::Stateless).await;
    let second = connect(Shop::new(provider.clone()), Protocol::Stateless).await;
    for client in [&first, &second, &first] {
        call(client, refund("refund_order", "2191", "customer asked")).await;
    }
    assert_eq!(provider.refunds_of("2191"), 1);
    assert_eq!(warnings.load(Ordering::SeqCst), 1, "said once per process");
}
