//! The metrics a guarded call records through the `metrics` facade, read
//! back from a debugging recorder: calls by tool and outcome, waits, store
//! steps timed by store and step.

use std::sync::Arc;

use idempotent_tools::{
    MemoryStore,
    call::{Call, Fingerprint, Key},
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

fn refund(store: &Arc<MemoryStore>, key: &Key, usd: u64) -> Call {
    let fingerprint = Fingerprint::builder()
        .arg("usd", &usd)
        .expect("usd")
        .finish();
    Call::new("shop::refund_order", key.clone())
        .fingerprint(fingerprint)
        .store(store)
}

/// A metric's name, labels and value.
type Sample = (String, Vec<(String, String)>, DebugValue);

/// The value of `name` whose labels include every one of `labels`.
fn value(snapshot: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<DebugValue> {
    snapshot
        .iter()
        .find(|(n, ls, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, v)| match v {
            DebugValue::Counter(n) => DebugValue::Counter(*n),
            DebugValue::Gauge(g) => DebugValue::Gauge(*g),
            DebugValue::Histogram(h) => DebugValue::Histogram(h.clone()),
        })
}

#[test]
fn calls_are_counted_by_tool_and_outcome_and_store_steps_are_timed() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let store = Arc::new(MemoryStore::new());
    let key = Key::builder()
        .literal("run-1:refund:")
        .and_then(|b| b.part("order_id", "1182"))
        .and_then(|b| b.finish())
        .expect("key");
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(async {
                let act = || async { Ok::<_, idempotent_tools::Error>(42u64) };
                for usd in [42, 42, 42, 41] {
                    let _ = refund(&store, &key, usd).run(act()).await.expect("a call");
                }
            });
    });
    let snapshot: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (key.name().to_owned(), labels, value)
        })
        .collect();
    let calls = |outcome| {
        value(
            &snapshot,
            "idempotent_tools_calls_total",
            &[("tool", "shop::refund_order"), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("fresh"), Some(DebugValue::Counter(1)), "{snapshot:?}");
    assert_eq!(
        calls("replay"),
        Some(DebugValue::Counter(2)),
        "{snapshot:?}"
    );
    assert_eq!(
        calls("conflict"),
        Some(DebugValue::Counter(1)),
        "{snapshot:?}"
    );
    let claims = value(
        &snapshot,
        "idempotent_tools_store_seconds",
        &[("store", "memory"), ("step", "claim")],
    );
    assert!(
        matches!(&claims, Some(DebugValue::Histogram(samples)) if samples.len() == 4),
        "{claims:?}"
    );
}
