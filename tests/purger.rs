//! The background purger: a purge at once and one every interval, on the
//! clock; none after it is stopped or dropped; a failing purge reported as
//! a warning and tried again; and on a real SQLite file, expired records go
//! while a held claim stays.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotent_tools::records::{Purger, PurgerError};
use idempotent_tools::{
    MemoryStore,
    call::Key,
    records::{
        Forget, PurgedBatch, Record, RecordCount, RecordPage, RecordQuery, Records, Resolution,
    },
    store::{
        Claim, ClaimAnswer, ClaimRequest, Completion, Store, StoreError, StoreFuture, StoreResult,
    },
};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// A memory store that counts purges, and fails them while told to.
struct Counting {
    inner: MemoryStore,
    purges: watch::Sender<u64>,
    failing: std::sync::atomic::AtomicBool,
    /// When each batch was asked for; the first two are full.
    batches: Mutex<Vec<Instant>>,
}

impl Counting {
    fn new() -> Arc<Counting> {
        Arc::new(Counting {
            inner: MemoryStore::new(),
            purges: watch::Sender::new(0),
            failing: std::sync::atomic::AtomicBool::new(false),
            batches: Mutex::new(Vec::new()),
        })
    }

    fn purges(&self) -> u64 {
        *self.purges.borrow()
    }

    /// Resolves once `n` purges have run: the test's only sync point.
    async fn reached(&self, n: u64) {
        let mut seen = self.purges.subscribe();
        seen.wait_for(|&count| count >= n).await.expect("open");
    }
}

impl Store for Counting {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        self.inner.claim(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        finished: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.complete(claim, finished)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.release(claim)
    }
    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.renew(claim, lease)
    }
}

impl Records for Counting {
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        self.purges.send_modify(|n| *n += 1);
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            let refused = std::io::Error::other("connection reset by peer");
            return StoreFuture::ready(Err(StoreError::Unavailable(Box::new(refused))));
        }
        self.inner.purge_expired()
    }
    fn purge_expired_batch(&self) -> StoreFuture<'_, StoreResult<PurgedBatch>> {
        let mut batches = self.batches.lock().expect("not poisoned");
        batches.push(Instant::now());
        StoreFuture::ready(Ok(PurgedBatch {
            removed: 1000,
            more: !batches.len().is_multiple_of(3),
        }))
    }
    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        self.inner.forget_with(key, how)
    }
    fn resolve<'a>(&'a self, key: &'a Key, how: Resolution) -> StoreFuture<'a, StoreResult<()>> {
        self.inner.resolve(key, how)
    }
    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        self.inner.list(query)
    }
    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        self.inner.inspect(key)
    }
    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        self.inner.count()
    }
}

/// Lets every task that is ready run, without moving the paused clock.
/// Installs, once for the whole binary, a global subscriber that wants every
/// event. `tracing` caches per call site whether anyone listens; a case that
/// ran with no subscriber could otherwise cache "nobody" for the purger's
/// events while the capturing case on another thread installs its own.
fn every_event_is_wanted() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_paced_purge_waits_its_pause_between_full_batches_and_stops_at_a_short_one() {
    let store = Counting::new();
    let start = Instant::now();
    let pause = Duration::from_millis(50);
    let removed = Purger::purge_now(&*store, pause).await.expect("purged");
    assert_eq!(removed, 3000, "three batches of 1,000");
    let batches = store.batches.lock().expect("not poisoned").clone();
    let offsets: Vec<Duration> = batches.iter().map(|at| *at - start).collect();
    assert_eq!(offsets, [Duration::ZERO, pause, pause * 2]);
    assert_eq!(
        store.purges(),
        0,
        "paced, the whole purge is never asked for"
    );

    let purger = Purger::start_paced(store.clone(), Duration::from_secs(60), pause).expect("start");
    assert_eq!(purger.pause(), pause);
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    let batches = store.batches.lock().expect("not poisoned").len();
    assert_eq!(
        batches, 9,
        "a purge at once and one a minute later, three batches each"
    );
    purger.stop().await;
}

#[tokio::test(start_paused = true)]
async fn it_purges_at_once_then_every_interval_on_the_clock() {
    every_event_is_wanted();
    let store = Counting::new();
    let start = Instant::now();
    let purger = Purger::start(store.clone(), Duration::from_secs(60)).expect("start");
    store.reached(1).await;
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the first purge runs at once"
    );
    store.reached(3).await;
    assert_eq!(start.elapsed(), Duration::from_secs(120));
    assert_eq!(store.purges(), 3);
    assert_eq!(purger.every(), Duration::from_secs(60));
    purger.stop().await;
}

#[tokio::test(start_paused = true)]
async fn no_purge_runs_after_it_is_stopped_or_dropped() {
    every_event_is_wanted();
    let store = Counting::new();
    let purger = Purger::start(store.clone(), Duration::from_secs(60)).expect("start");
    store.reached(2).await;
    purger.stop().await;
    tokio::time::advance(Duration::from_secs(600)).await;
    settle().await;
    assert_eq!(store.purges(), 2, "stopped");

    let dropped = Counting::new();
    let purger = Purger::start(dropped.clone(), Duration::from_secs(60)).expect("start");
    dropped.reached(1).await;
    drop(purger);
    tokio::time::advance(Duration::from_secs(600)).await;
    settle().await;
    assert_eq!(dropped.purges(), 1, "dropped");
}

/// An event as captured: its level and its fields.
type Seen = (Level, Vec<(String, String)>);

/// Events of the `idempotent_tools` target.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        self.0.push((field.name().to_owned(), text));
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "idempotent_tools" {
            return;
        }
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.0
            .lock()
            .expect("capture")
            .push((*event.metadata().level(), fields.0));
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_purge_is_a_warning_with_its_cause_and_the_next_runs_at_its_turn() {
    every_event_is_wanted();
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let store = Counting::new();
    store
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let purger = Purger::start(store.clone(), Duration::from_secs(60)).expect("start");
    store.reached(2).await;
    store
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    store.reached(3).await;
    settle().await;
    purger.stop().await;

    let events = capture.0.lock().expect("capture").clone();
    let field = |fields: &[(String, String)], name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let warnings: Vec<_> = events.iter().filter(|(l, _)| *l == Level::WARN).collect();
    assert_eq!(warnings.len(), 2, "{events:?}");
    let (_, fields) = warnings[0];
    assert!(field(fields, "message").contains("purging expired records failed"));
    assert_eq!(field(fields, "store"), "custom");
    assert_eq!(
        field(fields, "error"),
        "the store is unavailable: connection reset by peer"
    );
    let purged: Vec<_> = events.iter().filter(|(l, _)| *l == Level::DEBUG).collect();
    assert_eq!(purged.len(), 1, "{events:?}");
    assert_eq!(field(&purged[0].1, "purged"), "0");
}

#[test]
fn a_zero_interval_or_no_runtime_is_refused_with_what_to_do() {
    every_event_is_wanted();
    let store = Arc::new(MemoryStore::new());
    let err = Purger::start(store.clone(), Duration::from_secs(60)).expect_err("no runtime");
    assert!(matches!(err, PurgerError::NoRuntime), "{err:?}");
    assert!(err.to_string().contains("#[tokio::main]"), "{err}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _entered = runtime.enter();
    let err = Purger::start(store, Duration::ZERO).expect_err("zero");
    assert!(matches!(err, PurgerError::ZeroInterval), "{err:?}");
}

/// On a real file: records kept for no time go at the purger's pace, the
/// store's own count being the sync point; a held claim stays.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_sqlite_file_expired_records_go_and_a_held_claim_stays() {
    expired_records_go_and_a_held_claim_stays(1000, Duration::ZERO).await;
}

/// The same with batches of one row and a pause between them: every batch
/// goes, one by one.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_in_batches_of_one_expired_records_go_and_a_held_claim_stays() {
    expired_records_go_and_a_held_claim_stays(1, Duration::from_millis(1)).await;
}

#[cfg(feature = "sqlite")]
async fn expired_records_go_and_a_held_claim_stays(batch: usize, pause: Duration) {
    every_event_is_wanted();
    use idempotent_tools::{
        SqliteStore,
        call::{Fingerprint, ToolId},
        records::RecordState,
        store::RecordValue,
    };
    use std::time::SystemTime;

    static TOOL: ToolId = ToolId::new("shop::refund_order");
    let dir = tempfile::tempdir().expect("dir");
    let store = Arc::new(
        SqliteStore::builder(dir.path().join("claims.db"))
            .purge_batch(batch)
            .open()
            .expect("open"),
    );
    let request = |key: &'static Key, retention: Duration| ClaimRequest {
        key,
        tool: &TOOL,
        fingerprint: Fingerprint::builder().finish(),
        lease: Duration::from_secs(300),
        retention,
    };
    let held: &'static Key = Box::leak(Box::new(Key::parse("run-1:refund:held").expect("a key")));
    assert!(matches!(
        store.claim(request(held, Duration::ZERO)).await,
        Ok(ClaimAnswer::Claimed(_))
    ));
    for n in 0..3 {
        let key: &'static Key = Box::leak(Box::new(
            Key::parse(&format!("run-1:refund:{n}")).expect("a key"),
        ));
        let Ok(ClaimAnswer::Claimed(claim)) = store.claim(request(key, Duration::ZERO)).await
        else {
            panic!("a fresh claim");
        };
        let finished = Completion {
            state: RecordState::Done,
            value: RecordValue::from_json("{}"),
            completed_at: SystemTime::now(),
        };
        store.complete(&claim, finished).await.expect("complete");
    }
    let total = |counts: Vec<idempotent_tools::records::RecordCount>| -> (u64, u64) {
        let held = counts
            .iter()
            .filter(|c| c.state == RecordState::Held)
            .map(|c| c.count)
            .sum();
        (counts.iter().map(|c| c.count).sum(), held)
    };
    assert_eq!(total(store.count().await.expect("count")), (4, 1));

    let purger =
        Purger::start_paced(store.clone(), Duration::from_millis(20), pause).expect("start");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (all, held) = total(store.count().await.expect("count"));
        if all == 1 {
            assert_eq!(held, 1, "the held claim stays");
            break;
        }
        assert!(Instant::now() < deadline, "expired records still there");
        // The pace of looking again; the count decides.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    purger.stop().await;
}
