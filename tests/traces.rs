//! What the guard tells a `tracing` subscriber: one span per guarded call
//! naming the tool, the run, the key's digest and the store; events at the
//! levels an operator expects; and never the key's text.

use std::sync::{Arc, Mutex};

use idempotent_tools::{
    MemoryStore, Outcome, Run,
    call::{Call, Fingerprint, Key},
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// An event as captured: its level, its fields, and its span's fields.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    fields: Vec<(String, String)>,
    span: Vec<(String, String)>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn span_field(&self, name: &str) -> Option<&str> {
        self.span
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn message(&self) -> &str {
        self.field("message").unwrap_or_default()
    }
}

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

/// A layer that keeps every event with its span's fields.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

struct SpanFields(Vec<(String, String)>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields(Vec::new());
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.0));
        }
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        let span = ctx
            .event_span(event)
            .and_then(|s| s.extensions().get::<SpanFields>().map(|f| f.0.clone()))
            .unwrap_or_default();
        self.0.lock().expect("capture").push(Seen {
            level: *event.metadata().level(),
            fields: fields.0,
            span,
        });
    }
}

fn refund(store: &Arc<MemoryStore>, key: &Key, usd: u64) -> Call {
    let fingerprint = Fingerprint::builder()
        .arg("usd", &usd)
        .expect("usd")
        .finish();
    Call::new("shop::refund_order", key.clone())
        .fingerprint(fingerprint)
        .store(store)
}

/// Runs `body` on a current-thread runtime with the capturing subscriber.
fn captured(body: impl std::future::Future<Output = ()>) -> Vec<Seen> {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(body);
    });
    capture.0.lock().expect("capture").clone()
}

#[test]
fn a_replay_and_a_conflict_are_info_and_name_the_call_by_tool_run_and_key_digest() {
    let store = Arc::new(MemoryStore::new());
    let run = Run::new("run-7").expect("run");
    let key = Key::builder()
        .part("run", &run)
        .and_then(|b| b.literal(":refund:"))
        .and_then(|b| b.part("email", "jane@example.com"))
        .and_then(|b| b.finish())
        .expect("key");
    let seen = captured(run.clone().scope(async {
        let act = || async { Ok::<_, idempotent_tools::Error>(42u64) };
        let fresh: Outcome<u64> = refund(&store, &key, 42).run(act()).await.expect("fresh");
        let replay = refund(&store, &key, 42).run(act()).await.expect("replay");
        let conflict = refund(&store, &key, 41).run(act()).await.expect("conflict");
        assert!(fresh.is_fresh() && replay.is_replay() && conflict.is_conflict());
    }));

    let digest: String = {
        use sha2_hex::hex_prefix;
        hex_prefix(key.as_str())
    };
    let replays: Vec<_> = seen
        .iter()
        .filter(|s| s.message().starts_with("replayed"))
        .collect();
    assert_eq!(replays.len(), 1, "{seen:#?}");
    assert_eq!(replays[0].level, Level::INFO);
    let conflicts: Vec<_> = seen
        .iter()
        .filter(|s| s.field("reason").is_some())
        .collect();
    assert_eq!(conflicts.len(), 1, "{seen:#?}");
    assert_eq!(conflicts[0].level, Level::INFO);
    assert_eq!(conflicts[0].field("reason"), Some("arguments"));
    let fresh: Vec<_> = seen
        .iter()
        .filter(|s| s.message().starts_with("acted"))
        .collect();
    assert_eq!(fresh.len(), 1, "{seen:#?}");
    assert_eq!(fresh[0].level, Level::DEBUG);

    for event in &seen {
        assert_eq!(
            event.span_field("tool"),
            Some("shop::refund_order"),
            "{event:?}"
        );
        assert_eq!(event.span_field("run"), Some("run-7"), "{event:?}");
        assert_eq!(event.span_field("store"), Some("memory"), "{event:?}");
        assert_eq!(event.span_field("key"), Some(digest.as_str()), "{event:?}");
        // The key's text carries a customer's address: it is never logged.
        let everything = format!("{event:?}");
        assert!(!everything.contains("jane@example.com"), "{everything}");
    }
}

#[test]
fn a_duplicate_past_its_wait_deadline_is_a_warning() {
    let store = Arc::new(MemoryStore::new());
    let key = Key::builder()
        .literal("run-1:refund:")
        .and_then(|b| b.part("order_id", "9"))
        .and_then(|b| b.finish())
        .expect("key");
    let seen = captured(async {
        let holding = tokio::sync::Notify::new();
        let release = tokio::sync::Notify::new();
        let holder = refund(&store, &key, 42).run(async {
            holding.notify_one();
            release.notified().await;
            Ok::<_, idempotent_tools::Error>(1u64)
        });
        let duplicate = async {
            holding.notified().await;
            let err = refund(&store, &key, 42)
                .wait(std::time::Duration::ZERO)
                .run(async { Ok::<_, idempotent_tools::Error>(2u64) })
                .await
                .expect_err("in progress");
            assert!(matches!(err, idempotent_tools::Error::InProgress { .. }));
            release.notify_one();
        };
        let (held, ()) = tokio::join!(holder, duplicate);
        assert!(held.expect("holder").is_fresh());
    });
    let waiting = seen
        .iter()
        .find(|s| s.message().starts_with("another call holds"));
    assert_eq!(waiting.map(|s| s.level), Some(Level::DEBUG), "{seen:#?}");
    let passed = seen
        .iter()
        .find(|s| s.message().starts_with("the wait deadline passed"));
    assert_eq!(passed.map(|s| s.level), Some(Level::WARN), "{seen:#?}");
}

/// The digest traces show, computed here independently.
mod sha2_hex {
    pub fn hex_prefix(text: &str) -> String {
        let store = idempotent_tools::call::Key::parse(text).expect("a rendered key");
        hex(&store.digest()[..8])
    }
    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
