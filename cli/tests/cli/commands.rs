//! Every command against one store, whichever it is: the SQLite and
//! Postgres cases run these on a store of their own.

use std::time::{Duration, SystemTime};

use idempotent_tools::records::RecordState;
use idempotent_tools::store::Store;
use serde_json::Value;

use crate::records::{
    CANCEL, REFUND, claim, finish, finish_keeping, fresh_run, key, keys, one_of_each,
};
use crate::run::cli;

/// Every command on a store holding [`one_of_each`], named by `target`.
pub async fn every_command(store: &dyn Store, target: &str) {
    let run = one_of_each(store).await;
    let run_args = ["--run", run.as_str()];
    let list = |extra: &[&str]| {
        let mut args = vec!["list", "--json"];
        args.extend(run_args);
        args.extend(extra);
        cli(target, &args).expect(0).json()
    };

    // Filters.
    let all = list(&[]);
    assert_eq!(
        keys(&all),
        [
            "a-held",
            "b-crashed",
            "c-done",
            "d-unknown",
            "e-error",
            "f-old"
        ]
    );
    assert_eq!(all["next"], Value::Null);
    assert_eq!(keys(&list(&["--state", "unknown"])), ["d-unknown"]);
    assert_eq!(keys(&list(&["--state", "held"])), ["a-held", "b-crashed"]);
    assert_eq!(keys(&list(&["--state", "failed"])), ["e-error"]);
    assert_eq!(keys(&list(&["--tool", "shop::cancel_order"])), ["e-error"]);
    assert_eq!(keys(&list(&["--older-than", "1h"])), ["f-old"]);
    let unknown = &list(&["--state", "unknown"])["records"][0];
    assert_eq!(unknown["tool"], "shop::refund_order");
    assert_eq!(unknown["result"]["why"], "its holder stopped mid-action");
    assert_eq!(unknown["state"], "unknown");

    // A run whose id begins with this one's is another run; a key prefix
    // finds both.
    let longer = format!("{run}0");
    finish(
        store,
        &key(&longer, "g-other-run"),
        &REFUND,
        RecordState::Done,
        SystemTime::now(),
    )
    .await;
    assert_eq!(keys(&list(&[])).len(), 6, "`--run {run}` listed `{longer}`");
    let by_prefix = cli(target, &["list", "--json", "--key-prefix", &run])
        .expect(0)
        .json();
    assert_eq!(
        keys(&by_prefix),
        [
            "g-other-run",
            "a-held",
            "b-crashed",
            "c-done",
            "d-unknown",
            "e-error",
            "f-old"
        ]
    );

    // Paging: a page of two, then the rest after it, or every page at once.
    let first = list(&["--limit", "2"]);
    assert_eq!(keys(&first), ["a-held", "b-crashed"]);
    let next = first["next"].as_str().expect("a next page").to_owned();
    assert_eq!(
        keys(&list(&["--limit", "4", "--after", &next])),
        ["c-done", "d-unknown", "e-error", "f-old"]
    );
    assert_eq!(keys(&list(&["--limit", "1", "--all"])).len(), 6);

    // The table for people, and the hint to the next page.
    let table = cli(target, &["list", "--run", &run, "--limit", "2"]).expect(0);
    let mut lines = table.stdout.lines();
    let header = lines.next().expect("a header");
    assert!(
        header.starts_with("STATE") && header.ends_with("KEY"),
        "{header}"
    );
    assert_eq!(lines.count(), 2, "{}", table.stdout);
    assert!(table.stderr.contains("--after"), "{}", table.stderr);

    // One record in full, by key and by the digest traces print.
    let unknown_key = key(&run, "d-unknown");
    let shown = cli(target, &["show", unknown_key.as_str()]).expect(0);
    assert!(
        shown.stdout.contains("state        unknown"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stderr.contains("check with the provider"),
        "{}",
        shown.stderr
    );
    let done = cli(target, &["show", "--json", key(&run, "c-done").as_str()])
        .expect(0)
        .json();
    assert_eq!(done["result"]["id"], "re_1");
    assert_eq!(done["fence"], 1);
    let digest = done["key_digest"].as_str().expect("digest")[..16].to_owned();
    let by_digest = cli(target, &["show", "--json", "--digest", &digest])
        .expect(0)
        .json();
    assert_eq!(by_digest["key"], done["key"]);

    // Forget: a live claim is refused (4) unless forced; no terminal and
    // no --yes is bad usage (2); each leaves the record.
    let held = key(&run, "a-held");
    let refused = cli(target, &["forget", "--yes", held.as_str()]).expect(4);
    assert!(
        refused.stderr.contains("lease is live"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    let unasked = cli(target, &["forget", unknown_key.as_str()]).expect(2);
    assert!(unasked.stderr.contains("--yes"), "{}", unasked.stderr);
    cli(target, &["show", unknown_key.as_str()]).expect(0);

    // The crashed holder's claim and the unknown outcome go with --yes; the
    // live claim with --force.
    for name in ["b-crashed", "d-unknown"] {
        let forgotten = cli(target, &["forget", "--yes", key(&run, name).as_str()]).expect(0);
        assert!(forgotten.stdout.starts_with("forgot"), "{forgotten:?}");
    }
    cli(target, &["forget", "--yes", "--force", held.as_str()]).expect(0);
    assert_eq!(keys(&list(&[])), ["c-done", "e-error", "f-old"]);
    let gone = cli(target, &["show", unknown_key.as_str()]).expect(3);
    assert!(
        gone.stderr.contains("no record under key"),
        "{}",
        gone.stderr
    );
    assert!(gone.stderr.contains("help: "), "{}", gone.stderr);
    cli(target, &["forget", "--yes", unknown_key.as_str()]).expect(3);
    cli(target, &["show", "--digest", "ffffffffffffffffffff"]).expect(3);
    cli(target, &["show", "--digest", "not-hex"]).expect(2);

    pending_and_resolve(store, target).await;
}

/// `pending` lists the unknown outcomes with why; `resolve` settles them
/// as applied (replayed) or not applied (gone), and refuses a live claim,
/// a known outcome, a missing key and text that is not JSON, changing
/// nothing.
async fn pending_and_resolve(store: &dyn Store, target: &str) {
    let run = one_of_each(store).await;
    let pending = cli(target, &["pending", "--json", "--run", &run])
        .expect(0)
        .json();
    assert_eq!(keys(&pending), ["d-unknown"]);
    let unknown = &pending["records"][0];
    assert_eq!(unknown["why"], "its holder stopped mid-action");
    assert_eq!(unknown["error"], "connection reset");
    assert_eq!(unknown["tool"], "shop::refund_order");
    assert_eq!(unknown["fence"], 1);
    let fingerprint = unknown["fingerprint"].as_str().expect("a fingerprint");
    assert_eq!(fingerprint.len(), 32, "{fingerprint}");
    assert!(unknown["completed_at"].is_string(), "{unknown}");
    let table = cli(target, &["pending", "--run", &run]).expect(0);
    let mut lines = table.stdout.lines();
    let header = lines.next().expect("a header");
    assert!(
        header.starts_with("TOOL") && header.ends_with("WHY"),
        "{header}"
    );
    let row = lines.next().expect("a row");
    assert!(
        row.contains("d-unknown")
            && row.contains("its holder stopped mid-action (error: connection reset)"),
        "{row}"
    );
    assert_eq!(lines.next(), None, "{}", table.stdout);

    // `show` says why, and the last error, beside the arguments'
    // fingerprint.
    let unknown_key = key(&run, "d-unknown");
    let shown = cli(target, &["show", unknown_key.as_str()]).expect(0);
    for (field, value) in [
        ("fingerprint", fingerprint),
        ("why", "its holder stopped mid-action"),
        ("last error", "connection reset"),
    ] {
        assert!(
            shown
                .stdout
                .lines()
                .any(|line| line.starts_with(field) && line.trim_end().ends_with(value)),
            "{field} in:\n{}",
            shown.stdout
        );
    }

    // Refused, nothing changed: text that is not JSON (2), a live claim and
    // a known outcome (4, in the library's words), a missing key (3).
    let bad = cli(
        target,
        &["resolve", unknown_key.as_str(), "--applied", "{re_1"],
    )
    .expect(2);
    assert!(bad.stderr.contains("not JSON"), "{}", bad.stderr);
    let held = key(&run, "a-held");
    let live = cli(target, &["resolve", held.as_str(), "--not-applied"]).expect(4);
    assert!(live.stderr.contains("lease is live"), "{}", live.stderr);
    let done = cli(
        target,
        &["resolve", key(&run, "c-done").as_str(), "--not-applied"],
    )
    .expect(4);
    assert!(done.stderr.contains("is done"), "{}", done.stderr);
    cli(
        target,
        &["resolve", key(&run, "never").as_str(), "--not-applied"],
    )
    .expect(3);
    // Neither or both of --applied and --not-applied is bad usage.
    cli(target, &["resolve", unknown_key.as_str()]).expect(2);
    cli(
        target,
        &[
            "resolve",
            unknown_key.as_str(),
            "--applied",
            "1",
            "--not-applied",
        ],
    )
    .expect(2);
    let list = |state: &str| {
        let listed = cli(target, &["list", "--json", "--run", &run, "--state", state]);
        keys(&listed.expect(0).json())
    };
    assert_eq!(list("unknown"), ["d-unknown"]);
    assert_eq!(list("held"), ["a-held", "b-crashed"]);

    // As applied: done with the value given. As not applied: gone.
    let applied = cli(
        target,
        &[
            "resolve",
            unknown_key.as_str(),
            "--applied",
            r#"{"id":"re_7"}"#,
        ],
    )
    .expect(0);
    assert!(applied.stdout.contains("as applied"), "{applied:?}");
    let shown = cli(target, &["show", "--json", unknown_key.as_str()])
        .expect(0)
        .json();
    assert_eq!(shown["state"], "done");
    assert_eq!(shown["result"]["id"], "re_7");
    assert_eq!(shown["fence"], 2);
    let crashed = key(&run, "b-crashed");
    cli(target, &["resolve", crashed.as_str(), "--not-applied"]).expect(0);
    cli(target, &["show", crashed.as_str()]).expect(3);
    let pending = cli(target, &["pending", "--json", "--run", &run])
        .expect(0)
        .json();
    assert_eq!(keys(&pending), Vec::<String>::new());
}

/// Stats and purge on a store of its own (they see every record).
pub async fn stats_and_purge(store: &dyn Store, target: &str) {
    let run = fresh_run();
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    claim(
        store,
        &key(&run, "held"),
        &REFUND,
        Duration::from_secs(300),
        hour,
    )
    .await;
    finish(store, &key(&run, "done-1"), &REFUND, RecordState::Done, now).await;
    finish(store, &key(&run, "done-2"), &REFUND, RecordState::Done, now).await;
    finish(
        store,
        &key(&run, "error"),
        &CANCEL,
        RecordState::Failed,
        now,
    )
    .await;
    let expired = key(&run, "expired");
    finish_keeping(
        store,
        &expired,
        &CANCEL,
        RecordState::Done,
        now,
        Duration::ZERO,
    )
    .await;

    let stats = cli(target, &["stats", "--json"]).expect(0).json();
    assert_eq!(stats["total"], 5);
    assert_eq!(stats["by_state"]["held"], 1);
    assert_eq!(stats["by_state"]["done"], 3);
    assert_eq!(stats["by_state"]["failed"], 1);
    assert_eq!(stats["by_state"]["unknown"], 0);
    let counts = stats["counts"].as_array().expect("counts");
    assert!(
        counts
            .iter()
            .any(|c| c["tool"] == "shop::refund_order" && c["state"] == "done" && c["count"] == 2)
    );
    let table = cli(target, &["stats"]).expect(0);
    assert!(
        table
            .stdout
            .contains("5 records: 1 held, 3 done, 1 failed, 0 unknown"),
        "{}",
        table.stdout
    );

    // The record kept for no time goes; nothing else does.
    let purged = cli(target, &["purge", "--json"]).expect(0).json();
    assert_eq!(purged["purged"], 1);
    cli(target, &["show", expired.as_str()]).expect(3);
    assert_eq!(
        cli(target, &["stats", "--json"]).expect(0).json()["total"],
        4
    );
    let again = cli(target, &["purge"]).expect(0);
    assert_eq!(again.stdout.trim(), "purged 0 expired records");
}
