//! `#[idempotent]` in an rmcp server over streamable HTTP on 127.0.0.1:
//! rmcp clients that send no `_meta`, on protocol 2025-11-25 (sessions) and
//! 2026-07-28 (stateless, a server instance per request). Every test counts
//! the refunds that the test kit's stand-in provider made.

mod framework_rmcp_common;

use framework_rmcp_common::{Headers, Protocol, call, connect_http, refund, serve_http, status};
use idempotent_tools::rmcp::{RunPolicy, RunSource};
use idempotent_tools::testing::Provider;
use rmcp::service::ServiceError;

const NONE: Headers<'static> = Headers {
    run: None,
    principal: None,
};

fn run(run: &str) -> Headers<'_> {
    Headers {
        run: Some(run),
        principal: None,
    }
}

fn principal(subject: &str) -> Headers<'_> {
    Headers {
        run: None,
        principal: Some(subject),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn identical_asks_in_one_http_session_refund_once_and_another_session_again() {
    let provider = Provider::default();
    let address = serve_http(provider.clone(), RunPolicy::new()).await;
    let first = connect_http(address, Protocol::Sessions, NONE).await;
    let (a, b) = tokio::join!(
        call(&first, refund("refund_order", "3101", "customer asked")),
        call(
            &first,
            refund("refund_order", "3101", "customer asked again")
        ),
    );
    let mut statuses = [status(&a), status(&b)];
    statuses.sort();
    assert_eq!(statuses, [Some("fresh"), Some("replay")]);
    assert_eq!(provider.refunds_of("3101"), 1);

    let second = connect_http(address, Protocol::Sessions, NONE).await;
    let other = call(&second, refund("refund_order", "3101", "customer asked")).await;
    assert_eq!(
        status(&other),
        Some("fresh"),
        "another session is another run"
    );
    assert_eq!(provider.refunds_of("3101"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn three_identical_stateless_asks_refund_once() {
    // Each request is served by a server instance of its own, with no
    // session and nothing to scope it: the server-wide run still makes the
    // repeats repeats.
    let provider = Provider::default();
    let address = serve_http(provider.clone(), RunPolicy::new()).await;
    let client = connect_http(address, Protocol::Stateless, NONE).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let result = call(&client, refund("refund_order", "3102", "customer asked")).await;
        assert_eq!(result.is_error, Some(false));
        statuses.push(status(&result).map(str::to_owned));
    }
    assert_eq!(provider.refunds_of("3102"), 1);
    assert_eq!(
        statuses[1..],
        [Some("replay".into()), Some("replay".into())]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stateless_asks_refund_once_per_principal() {
    let provider = Provider::default();
    let address = serve_http(provider.clone(), RunPolicy::new()).await;
    let alice = connect_http(address, Protocol::Stateless, principal("alice")).await;
    let alice_again = connect_http(address, Protocol::Stateless, principal("alice")).await;
    let bob = connect_http(address, Protocol::Stateless, principal("bob")).await;

    let (a, b) = tokio::join!(
        call(&alice, refund("refund_order", "3103", "customer asked")),
        call(
            &alice_again,
            refund("refund_order", "3103", "customer asked again")
        ),
    );
    let mut statuses = [status(&a), status(&b)];
    statuses.sort();
    assert_eq!(statuses, [Some("fresh"), Some("replay")]);
    assert_eq!(provider.refunds_of("3103"), 1);

    let other = call(&bob, refund("refund_order", "3103", "customer asked")).await;
    assert_eq!(
        status(&other),
        Some("fresh"),
        "another principal is another run"
    );
    assert_eq!(provider.refunds_of("3103"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_run_wins_over_the_session() {
    let provider = Provider::default();
    let address = serve_http(provider.clone(), RunPolicy::new()).await;
    // Two sessions in one run act once; a session in another run acts again.
    let first = connect_http(address, Protocol::Sessions, run("run-1")).await;
    let second = connect_http(address, Protocol::Sessions, run("run-1")).await;
    let third = connect_http(address, Protocol::Sessions, run("run-2")).await;
    call(&first, refund("refund_order", "3104", "customer asked")).await;
    let same_run = call(&second, refund("refund_order", "3104", "customer asked")).await;
    assert_eq!(status(&same_run), Some("replay"));
    assert_eq!(provider.refunds_of("3104"), 1);
    call(&third, refund("refund_order", "3104", "customer asked")).await;
    assert_eq!(provider.refunds_of("3104"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_run_wins_over_the_principal() {
    let provider = Provider::default();
    let address = serve_http(provider.clone(), RunPolicy::new()).await;
    let headers = |run| Headers {
        run: Some(run),
        principal: Some("alice"),
    };
    let first = connect_http(address, Protocol::Stateless, headers("run-3")).await;
    let second = connect_http(address, Protocol::Stateless, headers("run-4")).await;
    call(&first, refund("refund_order", "3105", "customer asked")).await;
    let other = call(&second, refund("refund_order", "3105", "customer asked")).await;
    assert_eq!(status(&other), Some("fresh"), "one principal, two runs");
    assert_eq!(provider.refunds_of("3105"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_run_header_is_refused_rather_than_widened() {
    let provider = Provider::default();
    let address = serve_http(provider.clone(), RunPolicy::new()).await;
    let client = connect_http(address, Protocol::Stateless, run("")).await;
    let result = client
        .call_tool(refund("refund_order", "3106", "customer asked"))
        .await;
    let Err(ServiceError::McpError(error)) = result else {
        panic!("expected a protocol error, got {result:?}");
    };
    assert!(
        error.message.contains("idempotent-run"),
        "{}",
        error.message
    );
    assert_eq!(provider.refunds_of("3106"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_server_that_refuses_unscoped_calls_needs_a_principal_or_a_run() {
    let provider = Provider::default();
    let policy = RunPolicy::new().without(RunSource::Meta).refuse_unscoped();
    let address = serve_http(provider.clone(), policy).await;
    let anonymous = connect_http(address, Protocol::Stateless, NONE).await;
    let result = anonymous
        .call_tool(refund("refund_order", "3107", "customer asked"))
        .await;
    assert!(
        matches!(result, Err(ServiceError::McpError(_))),
        "{result:?}"
    );
    assert_eq!(provider.refunds_of("3107"), 0);

    let alice = connect_http(address, Protocol::Stateless, principal("alice")).await;
    call(&alice, refund("refund_order", "3107", "customer asked")).await;
    assert_eq!(provider.refunds_of("3107"), 1);
}
