//! `#[idempotent]` in rmcp 3.11: real rmcp clients call a real MCP server
//! over an in-memory duplex pipe, as over stdio. Every test counts the
//! refunds that the test kit's stand-in provider made.

mod framework_rmcp_common;

use framework_rmcp_common::{
    Protocol, Shop, call, connect, in_run, refund, refund_in, status, texts,
};
use idempotent_tools::rmcp::{RUN_META_KEY, RunPolicy, RunSource};
use idempotent_tools_testing::Provider;
use rmcp::model::RequestMetaObject;
use rmcp::service::ServiceError;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn without_the_guard_two_concurrent_calls_refund_twice() {
    // The control: the two requests really do run at the same time.
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone()), Protocol::Sessions).await;
    let (a, b) = tokio::join!(
        client.call_tool(refund("refund_unguarded", "2180", "customer asked")),
        client.call_tool(refund("refund_unguarded", "2180", "customer asked twice")),
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(provider.refunds_of("2180"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_concurrent_calls_in_one_meta_run_refund_once() {
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone()), Protocol::Sessions).await;
    let (a, b) = tokio::join!(
        call(
            &client,
            in_run(refund("refund_order", "2181", "customer asked"), "run-1")
        ),
        call(
            &client,
            in_run(refund("refund_order", "2181", "as asked"), "run-1")
        ),
    );

    assert_eq!(provider.refunds_of("2181"), 1);
    let mut statuses = [status(&a), status(&b)];
    statuses.sort();
    assert_eq!(statuses, [Some("fresh"), Some("replay")]);
    assert_eq!(
        refund_in(&a),
        refund_in(&b),
        "both calls see the one refund"
    );
    for result in [&a, &b] {
        assert_eq!(result.is_error, Some(false), "a replay is not an error");
    }
    // The replay is the first result, then the note.
    let replay = if status(&a) == Some("replay") { &a } else { &b };
    assert_eq!(texts(replay).len(), 2);
    assert_eq!(
        texts(replay)[1],
        idempotent_tools::call::DEFAULT_REPLAY_NOTE
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_an_injected_failure_refunds_once() {
    let provider = Provider::default();
    provider.lose_next_reply();
    let client = connect(Shop::new(provider.clone()), Protocol::Sessions).await;

    let failed = call(&client, refund("refund_order", "2182", "customer asked")).await;
    assert_eq!(failed.is_error, Some(true), "the model reads the failure");
    assert!(texts(&failed)[0].contains("did not answer in time"));

    let retry = call(&client, refund("refund_order", "2182", "retrying")).await;
    assert_eq!(retry.is_error, Some(false));
    assert_eq!(
        refund_in(&retry).id,
        "re_1",
        "the provider kept the refund under the key"
    );
    assert_eq!(provider.refunds_of("2182"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_meta_run_wins_over_the_connection() {
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone()), Protocol::Sessions).await;
    for run in ["run-3", "run-4", "run-3"] {
        call(
            &client,
            in_run(refund("refund_order", "2183", "asked"), run),
        )
        .await;
    }
    assert_eq!(provider.refunds_of("2183"), 2, "one connection, two runs");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_sends_no_meta_refunds_once_per_connection() {
    let provider = Provider::default();
    let first = connect(Shop::new(provider.clone()), Protocol::Sessions).await;
    let (a, b) = tokio::join!(
        call(&first, refund("refund_order", "2184", "customer asked")),
        call(
            &first,
            refund("refund_order", "2184", "customer asked again")
        ),
    );
    let again = call(&first, refund("refund_order", "2184", "once more")).await;
    let mut statuses = [status(&a), status(&b), status(&again)];
    statuses.sort();
    assert_eq!(statuses, [Some("fresh"), Some("replay"), Some("replay")]);
    assert_eq!(provider.refunds_of("2184"), 1);

    let second = connect(Shop::new(provider.clone()), Protocol::Sessions).await;
    let other = call(&second, refund("refund_order", "2184", "customer asked")).await;
    assert_eq!(
        status(&other),
        Some("fresh"),
        "another connection is another run"
    );
    assert_eq!(provider.refunds_of("2184"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_client_over_a_pipe_shares_the_server_wide_run() {
    // 2026-07-28 has no handshake, so nothing marks a connection served
    // without `ConnectionRuns`: the request falls to the server-wide run,
    // never to a run of its own.
    let provider = Provider::default();
    let first = connect(Shop::new(provider.clone()), Protocol::Stateless).await;
    let second = connect(Shop::new(provider.clone()), Protocol::Stateless).await;
    let mut statuses = Vec::new();
    for client in [&first, &first, &second] {
        let result = call(client, refund("refund_order", "2185", "customer asked")).await;
        statuses.push(status(&result).map(str::to_owned));
    }
    assert_eq!(provider.refunds_of("2185"), 1);
    assert_eq!(
        statuses[1..],
        [Some("replay".into()), Some("replay".into())]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_the_session_source_scopes_connections_server_wide() {
    let provider = Provider::default();
    let policy = RunPolicy::new().without(RunSource::Session);
    let first = connect(
        Shop::with_policy(provider.clone(), policy),
        Protocol::Sessions,
    )
    .await;
    let second = connect(
        Shop::with_policy(provider.clone(), policy),
        Protocol::Sessions,
    )
    .await;
    call(&first, refund("refund_order", "2186", "customer asked")).await;
    let other = call(&second, refund("refund_order", "2186", "customer asked")).await;
    assert_eq!(status(&other), Some("replay"));
    assert_eq!(provider.refunds_of("2186"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_refuses_unscoped_calls_refunds_nothing_without_a_run() {
    let provider = Provider::default();
    let policy = RunPolicy::new()
        .without(RunSource::Session)
        .refuse_unscoped();
    let client = connect(
        Shop::with_policy(provider.clone(), policy),
        Protocol::Sessions,
    )
    .await;
    let result = client
        .call_tool(refund("refund_order", "2187", "customer asked"))
        .await;

    let Err(ServiceError::McpError(error)) = result else {
        panic!("expected a protocol error, got {result:?}");
    };
    assert!(
        error.message.contains("idempotent/run"),
        "{}",
        error.message
    );
    assert_eq!(provider.refunds_of("2187"), 0);

    // A run named in `_meta` still scopes the call.
    call(
        &client,
        in_run(refund("refund_order", "2187", "asked"), "run-5"),
    )
    .await;
    assert_eq!(provider.refunds_of("2187"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_the_meta_source_ignores_the_clients_run() {
    let provider = Provider::default();
    let policy = RunPolicy::new().without(RunSource::Meta);
    let client = connect(
        Shop::with_policy(provider.clone(), policy),
        Protocol::Sessions,
    )
    .await;
    for run in ["run-6", "run-7"] {
        call(
            &client,
            in_run(refund("refund_order", "2188", "asked"), run),
        )
        .await;
    }
    assert_eq!(provider.refunds_of("2188"), 1, "the connection scopes both");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_meta_run_is_refused_and_refunds_nothing() {
    let provider = Provider::default();
    let client = connect(Shop::new(provider.clone()), Protocol::Sessions).await;
    let mut params = refund("refund_order", "2189", "asked");
    let meta = params.meta.get_or_insert_with(RequestMetaObject::new);
    meta.insert(RUN_META_KEY.into(), json!(""));
    let result = client.call_tool(params).await;
    assert!(
        matches!(result, Err(ServiceError::McpError(_))),
        "{result:?}"
    );
    assert_eq!(provider.refunds_of("2189"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_is_not_in_the_input_schema_and_free_text_is_plain_text() {
    let client = connect(Shop::new(Provider::default()), Protocol::Sessions).await;
    let tools = client
        .list_all_tools()
        .await
        .unwrap_or_else(|e| panic!("list: {e}"));
    let tool = tools.iter().find(|t| t.name == "refund_order");
    let tool = tool.unwrap_or_else(|| panic!("refund_order is listed"));

    let hint = tool.annotations.as_ref().and_then(|a| a.idempotent_hint);
    assert_eq!(hint, Some(true));
    let schema = Value::Object((*tool.input_schema).clone());
    assert_eq!(schema["properties"]["reason"]["type"], "string");
    let properties = schema["properties"]
        .as_object()
        .map(|p| p.keys().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        properties,
        Some(vec!["order_id", "usd", "reason"]),
        "the run is not the model's to give"
    );
}
