//! Records put in a store through its public API, under a run of their
//! own, for the commands to find.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use idempotent_tools::{
    call::{Fingerprint, Key, ToolId},
    records::RecordState,
    store::{ClaimAnswer, ClaimRequest, Completion, RecordValue, Store},
};
use serde_json::Value;

/// The two tools the records are kept under.
pub static REFUND: ToolId = ToolId::new("shop::refund_order");
pub static CANCEL: ToolId = ToolId::new("shop::cancel_order");

/// A run id no other case, or earlier run of the tests, has used.
pub fn fresh_run() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "run-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The key of the refund `name` in `run`.
pub fn key(run: &str, name: &str) -> Key {
    Key::parse(&format!("{run}:refund:{name}")).expect("a key as a template renders it")
}

/// Claims `key` for `tool`, leaving it held for `lease`.
pub async fn claim(store: &dyn Store, key: &Key, tool: &ToolId, lease: Duration, keep: Duration) {
    let req = ClaimRequest {
        key,
        tool,
        fingerprint: Fingerprint::builder()
            .arg("usd", &42)
            .expect("fingerprint")
            .finish(),
        lease,
        retention: keep,
    };
    let state = store.claim(req).await.expect("claim");
    let ClaimAnswer::Claimed(claim) = state else {
        panic!("expected a fresh claim, got {state:?}");
    };
    let _ = claim;
}

/// Claims `key` and completes it as `state` at `at`, kept for an hour.
pub async fn finish(
    store: &dyn Store,
    key: &Key,
    tool: &ToolId,
    state: RecordState,
    at: SystemTime,
) {
    finish_keeping(store, key, tool, state, at, Duration::from_secs(3600)).await;
}

/// Claims `key` and completes it as `state` at `at`, kept for `keep`.
pub async fn finish_keeping(
    store: &dyn Store,
    key: &Key,
    tool: &ToolId,
    state: RecordState,
    at: SystemTime,
    keep: Duration,
) {
    let req = ClaimRequest {
        key,
        tool,
        fingerprint: Fingerprint::builder()
            .arg("usd", &42)
            .expect("fingerprint")
            .finish(),
        lease: Duration::from_secs(30),
        retention: keep,
    };
    let ClaimAnswer::Claimed(claim) = store.claim(req).await.expect("claim") else {
        panic!("expected a fresh claim");
    };
    let json = match state {
        RecordState::Done => r#"{"id":"re_1"}"#,
        RecordState::Failed => r#""card declined""#,
        // The detail the guard records for an unknown outcome.
        _ => r#"{"why":"its holder stopped mid-action","error":"connection reset"}"#,
    };
    let completion = Completion {
        state,
        value: RecordValue::from_json(json),
        completed_at: at,
    };
    store.complete(&claim, completion).await.expect("complete");
}

/// Under a fresh run: a live claim (`a-held`), a crashed holder's claim
/// (`b-crashed`, lease already over), a result (`c-done`), an unknown
/// outcome (`d-unknown`), a recorded error of the other tool (`e-error`),
/// and a result finished two hours ago (`f-old`).
pub async fn one_of_each(store: &dyn Store) -> String {
    let run = fresh_run();
    let hour = Duration::from_secs(3600);
    let now = SystemTime::now();
    claim(
        store,
        &key(&run, "a-held"),
        &REFUND,
        Duration::from_secs(300),
        hour,
    )
    .await;
    claim(
        store,
        &key(&run, "b-crashed"),
        &REFUND,
        Duration::ZERO,
        hour,
    )
    .await;
    finish(store, &key(&run, "c-done"), &REFUND, RecordState::Done, now).await;
    finish(
        store,
        &key(&run, "d-unknown"),
        &REFUND,
        RecordState::Unknown,
        now,
    )
    .await;
    finish(
        store,
        &key(&run, "e-error"),
        &CANCEL,
        RecordState::Failed,
        now,
    )
    .await;
    let two_hours_ago = now - 2 * hour;
    finish(
        store,
        &key(&run, "f-old"),
        &REFUND,
        RecordState::Done,
        two_hours_ago,
    )
    .await;
    run
}

/// The names of the keys a `list --json` listed, in order.
pub fn keys(listed: &Value) -> Vec<String> {
    listed["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            let key = r["key"].as_str().expect("key");
            key.rsplit(':').next().expect("name").to_owned()
        })
        .collect()
}
