//! `#[idempotent]` in an rmcp server over streamable HTTP on 127.0.0.1:
//! rmcp clients that send no `_meta`, on protocol 2025-11-25 (sessions) and
//! 2026-07-28 (stateless, a server instance per request). Every test counts
//! the refunds that the test kit's stand-in provider made.

mod framework_rmcp_common;

use framework_rmcp_common::{
    Headers, Protocol, Sessions, call, connect_http, in_run, post_refund, refund, serve_http,
    serve_http_with, status,
};
use idempotent_tools::rmcp::{RunPolicy, RunSource};
use idempotent_tools_testing::Provider;
use rmcp::service::ServiceError;
use serde_json::json;

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

// Who can read a run: no request, whatever it sends, reaches a run of
// another principal, another source, or the server-wide run.

#[tokio::test(flavor = "multi_thread")]
async fn a_client_naming_a_principals_run_in_meta_never_joins_it() {
    let provider = Provider::default();
    let address = serve_http_with(provider.clone(), RunPolicy::new(), Sessions::Stateless).await;
    let alice = connect_http(address, Protocol::Stateless, principal("alice")).await;
    call(&alice, refund("refund_order", "3120", "customer asked")).await;

    for named in [
        "principal/alice",
        "principal%2Falice",
        "principal/alice/meta/x",
    ] {
        let anonymous = connect_http(address, Protocol::Stateless, NONE).await;
        let result = call(
            &anonymous,
            in_run(refund("refund_order", "3120", "asked"), named),
        )
        .await;
        assert_eq!(
            status(&result),
            Some("fresh"),
            "`{named}` is not alice's run"
        );
    }
    let raw = post_refund(
        address,
        &[],
        Some(json!({"idempotent/run": "principal/alice"})),
        "3120",
    )
    .await;
    assert_eq!(
        raw.guard_status(),
        Some("replay"),
        "the same meta run as above: {raw:?}"
    );
    let as_alice = [("Authorization", "Bearer alice")];
    let raw = post_refund(address, &as_alice, None, "3120").await;
    assert_eq!(
        raw.guard_status(),
        Some("replay"),
        "alice's own run: {raw:?}"
    );
    assert_eq!(provider.refunds_of("3120"), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_naming_a_principals_run_in_the_header_never_joins_it() {
    let provider = Provider::default();
    let address = serve_http_with(provider.clone(), RunPolicy::new(), Sessions::Stateless).await;
    let alice = connect_http(address, Protocol::Stateless, principal("alice")).await;
    call(&alice, refund("refund_order", "3121", "customer asked")).await;

    let header = post_refund(
        address,
        &[("Idempotent-Run", "principal/alice")],
        None,
        "3121",
    )
    .await;
    assert_eq!(header.guard_status(), Some("fresh"), "{header:?}");
    assert_eq!(provider.refunds_of("3121"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_principals_sending_one_run_never_share_it() {
    let provider = Provider::default();
    let address = serve_http(provider.clone(), RunPolicy::new()).await;
    let alice = Headers {
        run: Some("run-9"),
        principal: Some("alice"),
    };
    let bob = Headers {
        run: Some("run-9"),
        principal: Some("bob"),
    };
    let alice = connect_http(address, Protocol::Stateless, alice).await;
    let bob = connect_http(address, Protocol::Stateless, bob).await;

    // By header.
    call(&alice, refund("refund_order", "3122", "customer asked")).await;
    let theirs = call(&bob, refund("refund_order", "3122", "customer asked")).await;
    assert_eq!(status(&theirs), Some("fresh"), "bob's run-9 is not alice's");
    assert_eq!(provider.refunds_of("3122"), 2);

    // By `_meta`, which wins over the header.
    call(
        &alice,
        in_run(refund("refund_order", "3123", "asked"), "run-10"),
    )
    .await;
    let theirs = call(
        &bob,
        in_run(refund("refund_order", "3123", "asked"), "run-10"),
    )
    .await;
    assert_eq!(status(&theirs), Some("fresh"));
    let again = call(
        &alice,
        in_run(refund("refund_order", "3123", "asked"), "run-10"),
    )
    .await;
    assert_eq!(
        status(&again),
        Some("replay"),
        "alice's own run is still hers"
    );
    assert_eq!(provider.refunds_of("3123"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_wide_run_cannot_be_named() {
    let provider = Provider::default();
    let address = serve_http_with(provider.clone(), RunPolicy::new(), Sessions::Stateless).await;
    let anonymous = connect_http(address, Protocol::Stateless, NONE).await;
    call(&anonymous, refund("refund_order", "3124", "customer asked")).await;

    let by_meta = post_refund(
        address,
        &[],
        Some(json!({"idempotent/run": "server-wide"})),
        "3124",
    )
    .await;
    assert_eq!(by_meta.guard_status(), Some("fresh"), "{by_meta:?}");
    let by_header = post_refund(address, &[("Idempotent-Run", "server-wide")], None, "3124").await;
    assert_eq!(by_header.guard_status(), Some("fresh"), "{by_header:?}");
    let unscoped = post_refund(address, &[], None, "3124").await;
    assert_eq!(unscoped.guard_status(), Some("replay"), "{unscoped:?}");
    assert_eq!(provider.refunds_of("3124"), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invented_session_id_on_a_stateless_server_creates_no_run() {
    let provider = Provider::default();
    let address = serve_http_with(provider.clone(), RunPolicy::new(), Sessions::Stateless).await;
    let mut statuses = Vec::new();
    for id in ["invented-1", "invented-2", "invented-3"] {
        let answer = post_refund(address, &[("Mcp-Session-Id", id)], None, "3125").await;
        assert_eq!(answer.status, 200, "{answer:?}");
        statuses.push(answer.guard_status().map(str::to_owned));
    }
    assert_eq!(
        provider.refunds_of("3125"),
        1,
        "every request fell to the server-wide run"
    );
    assert_eq!(
        statuses[1..],
        [Some("replay".into()), Some("replay".into())]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invented_session_id_on_a_stateless_server_that_refuses_unscoped_calls_is_refused() {
    let provider = Provider::default();
    let policy = RunPolicy::new().refuse_unscoped();
    let address = serve_http_with(provider.clone(), policy, Sessions::Stateless).await;
    let answer = post_refund(address, &[("Mcp-Session-Id", "invented")], None, "3126").await;
    let error = answer
        .error()
        .unwrap_or_else(|| panic!("refused: {answer:?}"));
    assert!(error.contains("nothing was done"), "{error}");
    // Even with the meta source left out, which such servers use to stop
    // clients from choosing runs.
    let policy = RunPolicy::new().without(RunSource::Meta).refuse_unscoped();
    let strict = serve_http_with(provider.clone(), policy, Sessions::Stateless).await;
    let answer = post_refund(strict, &[("Mcp-Session-Id", "invented")], None, "3126").await;
    assert!(answer.error().is_some(), "refused: {answer:?}");
    assert_eq!(provider.refunds_of("3126"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invented_session_id_on_a_server_with_sessions_never_reaches_the_tool() {
    let provider = Provider::default();
    for sessions in [Sessions::Runs, Sessions::Unmarked] {
        let address = serve_http_with(provider.clone(), RunPolicy::new(), sessions).await;
        let answer = post_refund(address, &[("Mcp-Session-Id", "invented")], None, "3127").await;
        assert_eq!(answer.status, 404, "{sessions:?}: {answer:?}");
    }
    assert_eq!(provider.refunds_of("3127"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_the_server_does_not_mark_are_not_runs() {
    // Without `SessionRuns` no tool can tell an issued session from an
    // invented one: two sessions fall to the server-wide run and share it.
    let provider = Provider::default();
    let address = serve_http_with(provider.clone(), RunPolicy::new(), Sessions::Unmarked).await;
    let first = connect_http(address, Protocol::Sessions, NONE).await;
    let second = connect_http(address, Protocol::Sessions, NONE).await;
    call(&first, refund("refund_order", "3128", "customer asked")).await;
    let other = call(&second, refund("refund_order", "3128", "customer asked")).await;
    assert_eq!(status(&other), Some("replay"));
    assert_eq!(provider.refunds_of("3128"), 1);

    // And a server that refuses unscoped calls refuses them.
    let policy = RunPolicy::new().refuse_unscoped();
    let strict = serve_http_with(provider.clone(), policy, Sessions::Unmarked).await;
    let client = connect_http(strict, Protocol::Sessions, NONE).await;
    let refused = client
        .call_tool(refund("refund_order", "3129", "asked"))
        .await;
    assert!(
        matches!(refused, Err(ServiceError::McpError(_))),
        "{refused:?}"
    );
    assert_eq!(provider.refunds_of("3129"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn principals_never_share_the_server_wide_run_even_when_the_policy_skips_them() {
    // The server keeps principals out of its run order, so a request with
    // nothing else falls to the server-wide run: one per principal.
    let provider = Provider::default();
    let policy = RunPolicy::new().without(RunSource::Principal);
    let address = serve_http_with(provider.clone(), policy, Sessions::Stateless).await;
    let as_alice = [("Authorization", "Bearer alice")];
    let as_bob = [("Authorization", "Bearer bob")];
    let first = post_refund(address, &as_alice, None, "3130").await;
    assert_eq!(first.guard_status(), Some("fresh"), "{first:?}");
    let again = post_refund(address, &as_alice, None, "3130").await;
    assert_eq!(again.guard_status(), Some("replay"), "{again:?}");
    let bob = post_refund(address, &as_bob, None, "3130").await;
    assert_eq!(
        bob.guard_status(),
        Some("fresh"),
        "bob never reads alice's refund: {bob:?}"
    );
    let anonymous = post_refund(address, &[], None, "3130").await;
    assert_eq!(anonymous.guard_status(), Some("fresh"), "{anonymous:?}");
    assert_eq!(provider.refunds_of("3130"), 3);
}
