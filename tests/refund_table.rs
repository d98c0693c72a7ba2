//! Every number the refund example prints, asserted against the example's own
//! code: the table is built by the same `table()` that `cargo run --example
//! refund` prints.

// The example's `main` is not called here.
#[allow(dead_code)]
#[path = "../examples/refund/main.rs"]
mod refund;

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::{
    CallId, Run,
    call::{DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE},
};
use idempotent_tools_testing::{
    Provider, ProviderError, Runner, ScriptedModel, ToolCall, Tools, assert_one_action,
    assert_same_key_for_same_ask,
};
use refund::{Row, Shop, Table};
use serde_json::json;
use tokio::sync::{Barrier, OnceCell};

/// The table, built once and read by every test below.
async fn table() -> &'static Table {
    static TABLE: OnceCell<Table> = OnceCell::const_new();
    TABLE
        .get_or_init(|| async { refund::table().await.expect("the table builds") })
        .await
}

async fn row(version: &str) -> &'static Row {
    let table = table().await;
    table
        .row(version)
        .unwrap_or_else(|| panic!("no row `{version}` in the table"))
}

/// Asserts the row's refunds on file, calls received and what the model got.
async fn assert_row(version: &str, refunds: usize, calls: usize, model_got: &str) {
    let row = row(version).await;
    assert_eq!(
        (
            row.refunds_on_file,
            row.calls_received,
            row.model_got.as_str()
        ),
        (refunds, calls, model_got),
        "row `{version}`: (refunds on file, calls received, the model got)"
    );
}

#[tokio::test]
async fn the_table_has_the_six_usual_versions_the_four_idempotent_rows_the_ledger_rows_then_the_keyless_provider_rows()
 {
    let versions: Vec<_> = table().await.rows.iter().map(|row| row.version).collect();
    assert_eq!(
        versions,
        [
            "no key",
            "key = tool call id",
            "key = run + order",
            "check, then act",
            "claim first, then act",
            "one at a time, check, then act",
            "#[idempotent]: two identical calls in one step",
            "#[idempotent]: the same call in two steps",
            "#[idempotent]: fails after the refund, retried",
            "#[idempotent]: $42, then $41 on the same order",
            "ledger in SQLite: crashes after its write",
            "ledger in SQLite: same crash, in a transaction",
            "provider ignores keys: answer lost, retried",
            "provider ignores keys: with `verify`",
            "provider ignores keys: reported, then resolved",
        ]
    );
}

#[tokio::test]
async fn with_no_key_two_calls_in_one_step_refund_twice() {
    assert_row("no key", 2, 2, "re_1, re_2").await;
}

#[tokio::test]
async fn with_the_tool_call_id_as_the_key_two_calls_in_one_step_refund_twice() {
    assert_row("key = tool call id", 2, 2, "re_1, re_2").await;
}

#[tokio::test]
async fn with_the_run_and_order_as_the_key_the_provider_refunds_once() {
    // Both calls reach the provider; it answers the second with the first refund.
    assert_row("key = run + order", 1, 2, "re_1, re_1").await;
}

#[tokio::test]
async fn check_then_act_refunds_twice_when_the_calls_run_together() {
    assert_row("check, then act", 2, 2, "re_1, re_2").await;
}

#[tokio::test]
async fn claiming_before_acting_refunds_once() {
    assert_row("claim first, then act", 1, 1, "re_1, already refunded").await;
}

#[tokio::test]
async fn check_then_act_one_call_at_a_time_refunds_once() {
    assert_row(
        "one at a time, check, then act",
        1,
        1,
        "re_1, already refunded",
    )
    .await;
}

#[tokio::test]
async fn idempotent_two_identical_calls_in_one_step_refund_once() {
    // The second call waits for the first and gets its refund as a replay.
    assert_row(
        "#[idempotent]: two identical calls in one step",
        1,
        1,
        "fresh re_1, replay re_1",
    )
    .await;
}

#[tokio::test]
async fn idempotent_the_same_call_in_two_steps_refunds_once() {
    assert_row(
        "#[idempotent]: the same call in two steps",
        1,
        1,
        "fresh re_1 / replay re_1",
    )
    .await;
}

#[tokio::test]
async fn idempotent_a_tool_that_fails_after_the_refund_is_retried_and_refunds_once() {
    // The failure released the claim, so the retry ran the action again; the
    // provider got the same key twice and kept one refund.
    assert_row(
        "#[idempotent]: fails after the refund, retried",
        1,
        2,
        "error / fresh re_1",
    )
    .await;
}

#[tokio::test]
async fn idempotent_41_after_42_on_the_same_order_is_a_conflict_and_refunds_once() {
    assert_row(
        "#[idempotent]: $42, then $41 on the same order",
        1,
        1,
        "fresh re_1 / conflict",
    )
    .await;
}

#[tokio::test]
async fn the_model_is_told_on_a_repeat_that_the_refund_was_already_done() {
    let replay = table().await.replay.as_ref().expect("a replay was shown");
    assert_eq!(
        replay,
        &json!({
            "status": "replay",
            "value": { "id": "re_1", "order_id": "1182", "usd": 42 },
            "note": DEFAULT_REPLAY_NOTE,
        })
    );
}

#[tokio::test]
async fn the_model_is_told_on_a_conflict_which_refund_stands() {
    let conflict = table()
        .await
        .conflict
        .as_ref()
        .expect("a conflict was shown");
    assert_eq!(
        conflict,
        &json!({
            "status": "conflict",
            "first": { "id": "re_1", "order_id": "1182", "usd": 42 },
            "reason": "arguments",
            "note": DEFAULT_CONFLICT_NOTE,
        })
    );
}

#[tokio::test]
async fn a_ledger_write_that_commits_on_its_own_is_written_again_after_a_crash() {
    // The crash released the claim with nothing recorded; the committed row
    // stayed, and the retry wrote a second one.
    assert_row(
        "ledger in SQLite: crashes after its write",
        2,
        2,
        "error / fresh re_2",
    )
    .await;
}

#[tokio::test]
async fn a_ledger_write_in_the_calls_transaction_is_written_once_through_a_crash() {
    // The crash rolled the first write back with the call; the retry wrote
    // the only row.
    assert_row(
        "ledger in SQLite: same crash, in a transaction",
        1,
        2,
        "error / fresh re_1",
    )
    .await;
}

#[tokio::test]
async fn a_retry_after_a_lost_answer_refunds_twice_where_the_provider_ignores_keys() {
    // The failure released the claim; the retry handed the provider the same
    // key, which it ignored.
    assert_row(
        "provider ignores keys: answer lost, retried",
        2,
        2,
        "error / fresh re_2",
    )
    .await;
}

#[tokio::test]
async fn a_lost_answer_verified_with_the_provider_refunds_once() {
    // The error may have followed the refund: the provider was asked, had
    // it, and the call answered with it; the model had no reason to retry.
    assert_row("provider ignores keys: with `verify`", 1, 1, "fresh re_1").await;
}

#[tokio::test]
async fn a_lost_answer_reported_then_resolved_refunds_once() {
    // The call saw its own error, the retry was told the outcome is unknown,
    // and once an operator resolved the key with the provider's refund the
    // next ask replayed it.
    assert_row(
        "provider ignores keys: reported, then resolved",
        1,
        1,
        "error / error / replay re_1",
    )
    .await;
}

#[tokio::test]
async fn the_printed_table_shows_every_count_and_both_notes() {
    let printed = table().await.to_string();
    let lines: Vec<&str> = printed.lines().collect();
    for row in &table().await.rows {
        let line = lines
            .iter()
            .find(|line| line.starts_with(row.version))
            .unwrap_or_else(|| panic!("row `{}` is not printed", row.version));
        let cells: Vec<&str> = line[row.version.len()..].split_whitespace().collect();
        assert_eq!(cells[0], row.refunds_on_file.to_string(), "{line}");
        assert_eq!(cells[1], row.calls_received.to_string(), "{line}");
        assert!(line.ends_with(&row.model_got), "{line}");
    }
    assert!(printed.contains(DEFAULT_REPLAY_NOTE));
    assert!(printed.contains(DEFAULT_CONFLICT_NOTE));
}

// ---------------------------------------------------------------------------
// The same tools, beyond the printed table.

fn run() -> Run {
    Run::new("run-1").expect("a run id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_rows_hold_when_each_call_runs_in_its_own_spawned_task() {
    let spawned = Runner::spawned().in_run(run());

    let row = refund::attempt(&spawned, refund::twice_in_one_step(), refund::guarded).await;
    assert_eq!((row.refunds_on_file, row.calls_received), (1, 1));

    let row = refund::attempt(
        &spawned,
        refund::once_in_each_of_two_steps(),
        refund::guarded,
    )
    .await;
    assert_eq!((row.refunds_on_file, row.calls_received), (1, 1));

    let provider = Provider::new();
    provider.lose_next_reply();
    let shop = Shop::with_provider(provider);
    let model = refund::once_then_again_if_it_failed();
    let row = refund::attempt_in(shop, &spawned, model, refund::guarded).await;
    assert_eq!((row.refunds_on_file, row.calls_received), (1, 2));

    let row = refund::attempt(
        &spawned,
        refund::forty_two_then_forty_one(),
        refund::guarded,
    )
    .await;
    assert_eq!((row.refunds_on_file, row.calls_received), (1, 1));
    let second = row.transcript.result("call_b").and_then(|r| r.status());
    assert_eq!(second, Some("conflict"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_identical_calls_in_one_spawned_step_refund_once() {
    let provider = Provider::new();
    let shop = Shop::with_provider(provider.clone());
    let calls: Vec<ToolCall> = (0..16)
        .map(|i| refund::ask(&format!("call_{i}"), 42, &format!("reason {i}")))
        .collect();
    let model = ScriptedModel::new().step(calls);
    let tools = refund::tools(&shop, refund::guarded);
    let transcript = Runner::spawned().in_run(run()).run(model, &tools).await;

    assert_one_action(&provider);
    // The provider would deduplicate by key on its own; the guard kept the
    // other fifteen calls from reaching it at all.
    assert_eq!(provider.calls_received(), 1);
    let statuses: Vec<_> = transcript.results().filter_map(|r| r.status()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == "fresh").count(), 1);
    assert_eq!(statuses.iter().filter(|s| **s == "replay").count(), 15);
}

#[tokio::test]
async fn idempotent_sends_the_same_key_for_the_same_ask_under_a_new_call_id() {
    let guarded = |provider: &Provider| {
        refund::tools(&Shop::with_provider(provider.clone()), refund::guarded)
    };
    let first = refund::ask("call_a", 42, "damaged in transit");
    let again = refund::ask("call_b", 42, "arrived broken");
    let runner = Runner::new().in_run(run());
    let key = assert_same_key_for_same_ask(&runner, guarded, &first, &again).await;
    assert_eq!(key, "run-1:refund:1182");
}

#[tokio::test]
async fn idempotent_sends_another_key_for_another_order() {
    let provider = Provider::with_delay(Duration::ZERO);
    let shop = Shop::with_provider(provider.clone());
    let mut other = refund::ask("call_b", 42, "damaged in transit");
    other.args["order_id"] = json!("1183");
    let model = ScriptedModel::new()
        .step([refund::ask("call_a", 42, "damaged in transit")])
        .step([other]);
    let tools = refund::tools(&shop, refund::guarded);
    Runner::new().in_run(run()).run(model, &tools).await;
    let keys: Vec<_> = provider.received().into_iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        [
            Some("run-1:refund:1182".to_owned()),
            Some("run-1:refund:1183".to_owned())
        ]
    );
    assert_eq!(provider.refunds_on_file(), 2);
}

#[tokio::test]
#[should_panic(expected = "the same ask reached the provider under two keys")]
async fn a_tool_keyed_by_call_id_fails_the_same_key_check() {
    let by_call_id = |provider: &Provider| {
        refund::tools(
            &Shop::with_provider(provider.clone()),
            refund::key_is_call_id,
        )
    };
    let first = refund::ask("call_a", 42, "damaged in transit");
    assert_same_key_for_same_ask(&Runner::new(), by_call_id, &first, &first.with_id("call_b"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_then_act_refunds_twice_in_spawned_tasks_once_both_checks_pass() {
    // The example's check, with a barrier where the network would be: both
    // calls have checked before either acts, as happens in the joined run.
    let provider = Provider::with_delay(Duration::ZERO);
    let refunded = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let both_checked = Arc::new(Barrier::new(2));
    let tools = Tools::new().tool("refund_order", {
        let provider = provider.clone();
        move |args: serde_json::Value, _call: CallId| {
            let (provider, refunded) = (provider.clone(), Arc::clone(&refunded));
            let both_checked = Arc::clone(&both_checked);
            async move {
                let order = args["order_id"].as_str().unwrap_or_default().to_owned();
                if refunded.lock().expect("not poisoned").contains(&order) {
                    return Ok(None);
                }
                both_checked.wait().await;
                let refund = provider.refund(&order, 42, None).await?;
                refunded.lock().expect("not poisoned").insert(order);
                Ok::<_, ProviderError>(Some(refund))
            }
        }
    });
    let model = refund::twice_in_one_step();
    let spawned = Runner::spawned();
    tokio::time::timeout(Duration::from_secs(10), spawned.run(model, &tools))
        .await
        .expect("both calls reached the check");
    assert_eq!(provider.refunds_on_file(), 2);
}

#[tokio::test]
async fn every_row_says_what_went_wrong_or_why_its_count_is_right() {
    let table = table().await;
    for row in &table.rows {
        assert!(
            !row.verdict.is_empty(),
            "row `{}` has no verdict",
            row.version
        );
        let printed = table.to_string();
        assert!(
            printed.contains(row.verdict),
            "verdict of `{}` not printed",
            row.version
        );
    }
    // The rows that show one refund without the attribute say why it is not enough.
    for version in [
        "key = run + order",
        "claim first, then act",
        "one at a time, check, then act",
    ] {
        let verdict = row(version).await.verdict;
        assert!(verdict.contains("only"), "`{version}`: {verdict}");
    }
}

#[tokio::test]
async fn the_readme_shows_what_the_example_prints() {
    let readme = include_str!("../README.md");
    let shown = readme
        .split_once("$ cargo run --example refund\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .expect("the README shows the example's output in a text block");
    let printed = table().await.to_string();
    assert_eq!(
        shown.trim_end(),
        printed.trim_end(),
        "the README's copy of `cargo run --example refund` is out of date"
    );
}
