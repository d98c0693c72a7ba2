//! Counters and histograms through the `metrics` facade.
//!
//! Names and labels (also in the guide's operations chapter):
//!
//! | name | kind | labels |
//! | --- | --- | --- |
//! | `idempotent_tools_calls_total` | counter | `tool`, `outcome` |
//! | `idempotent_tools_waits_total` | counter | `tool` |
//! | `idempotent_tools_wait_seconds` | histogram | `tool` |
//! | `idempotent_tools_takeovers_total` | counter | `tool` |
//! | `idempotent_tools_store_errors_total` | counter | `store`, `step` |
//! | `idempotent_tools_store_seconds` | histogram | `store`, `step` |
//!
//! Keys are built once per tool (or store and step) and kept, so recording
//! allocates nothing after a tool's first call; the recorder is looked up
//! at every record, so one installed after the first calls still sees
//! every later one.

use std::sync::LazyLock;
use std::time::Duration;

use dashmap::DashMap;
use metrics::{Key, Label, Level, Metadata};

use super::CallOutcome;
use crate::tool::ToolId;

static METADATA: Metadata<'static> =
    Metadata::new(super::TARGET, Level::INFO, Some(module_path!()));

/// The keys of one tool's metrics.
struct ToolKeys {
    calls: [Key; CallOutcome::ALL.len()],
    waits: Key,
    wait_seconds: Key,
    takeovers: Key,
}

impl ToolKeys {
    fn new(tool: &ToolId) -> ToolKeys {
        let tool = || vec![Label::new("tool", tool.as_str().to_owned())];
        ToolKeys {
            calls: CallOutcome::ALL.map(|outcome| {
                let mut labels = tool();
                labels.push(Label::from_static_parts("outcome", outcome.as_str()));
                Key::from_parts("idempotent_tools_calls_total", labels)
            }),
            waits: Key::from_parts("idempotent_tools_waits_total", tool()),
            wait_seconds: Key::from_parts("idempotent_tools_wait_seconds", tool()),
            takeovers: Key::from_parts("idempotent_tools_takeovers_total", tool()),
        }
    }
}

static TOOLS: LazyLock<DashMap<ToolId, ToolKeys>> = LazyLock::new(DashMap::new);

/// Store keys by store kind and step.
struct StoreKeys {
    errors: Key,
    seconds: Key,
}

static STORES: LazyLock<DashMap<(&'static str, &'static str), StoreKeys>> =
    LazyLock::new(DashMap::new);

fn with_tool(tool: &ToolId, f: impl FnOnce(&ToolKeys)) {
    if let Some(keys) = TOOLS.get(tool) {
        return f(&keys);
    }
    let keys = TOOLS
        .entry(tool.clone())
        .or_insert_with(|| ToolKeys::new(tool));
    f(&keys.downgrade());
}

fn with_store(store: &'static str, step: &'static str, f: impl FnOnce(&StoreKeys)) {
    if let Some(keys) = STORES.get(&(store, step)) {
        return f(&keys);
    }
    let keys = STORES.entry((store, step)).or_insert_with(|| {
        let labels = || {
            vec![
                Label::from_static_parts("store", store),
                Label::from_static_parts("step", step),
            ]
        };
        StoreKeys {
            errors: Key::from_parts("idempotent_tools_store_errors_total", labels()),
            seconds: Key::from_parts("idempotent_tools_store_seconds", labels()),
        }
    });
    f(&keys.downgrade());
}

pub(super) fn call(tool: &ToolId, outcome: CallOutcome) {
    with_tool(tool, |keys| {
        let key = &keys.calls[outcome as usize];
        metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
    });
}

pub(super) fn wait(tool: &ToolId) {
    with_tool(tool, |keys| {
        metrics::with_recorder(|r| r.register_counter(&keys.waits, &METADATA).increment(1));
    });
}

pub(super) fn waited(tool: &ToolId, waited: Duration) {
    with_tool(tool, |keys| {
        metrics::with_recorder(|r| {
            r.register_histogram(&keys.wait_seconds, &METADATA)
                .record(waited.as_secs_f64())
        });
    });
}

pub(super) fn takeover(tool: &ToolId) {
    with_tool(tool, |keys| {
        metrics::with_recorder(|r| r.register_counter(&keys.takeovers, &METADATA).increment(1));
    });
}

pub(super) fn store_error(store: &'static str, step: &'static str) {
    with_store(store, step, |keys| {
        metrics::with_recorder(|r| r.register_counter(&keys.errors, &METADATA).increment(1));
    });
}

pub(super) fn store_latency(store: &'static str, step: &'static str, took: Duration) {
    with_store(store, step, |keys| {
        metrics::with_recorder(|r| {
            r.register_histogram(&keys.seconds, &METADATA)
                .record(took.as_secs_f64())
        });
    });
}
