//! The memory store: the conformance suite (within one process), plus what
//! only an in-process store can show (a paused clock, a million keys).

mod harness;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use idempotent_tools::{
    Error, MemoryStore, Run, RunError,
    call::{Call, Key, KeyError},
    records::Records,
    store::Store,
};
use idempotent_tools_testing::conformance::Suite;
use idempotent_tools_testing::conformance::kit::{
    CountingProvider as Provider, RefundError, fresh_run, refund_call, refund_key, refunds,
};

async fn a_record_is_replayed_within_its_retention_and_forgotten_after() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let run = fresh_run();
    let provider = Provider::default();
    let refund = || {
        refund_call(&store, &run, "1182", 42)
            .retention(Duration::from_secs(3600))
            .run(refunds(&provider, 42))
    };
    assert!(refund().await.expect("first").is_fresh());
    tokio::time::advance(Duration::from_secs(3599)).await;
    assert!(refund().await.expect("within retention").is_replay());
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(refund().await.expect("after retention").is_fresh());
    assert_eq!(provider.refunds(), 2);
}

async fn the_default_retention_outlasts_a_providers_key_memory() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let run = fresh_run();
    let provider = Provider::default();
    let refund = || refund_call(&store, &run, "1182", 42).run(refunds(&provider, 42));
    assert!(refund().await.expect("first").is_fresh());
    // Stripe forgets keys after 24 hours; a retry six days later is still caught.
    tokio::time::advance(Duration::from_secs(6 * 24 * 3600)).await;
    assert!(refund().await.expect("six days later").is_replay());
    assert_eq!(provider.refunds(), 1);
}

async fn sweeping_keeps_memory_bounded_over_a_million_unique_keys() {
    let store = Arc::new(MemoryStore::new());
    let run = Run::new("run-1").expect("run");
    let mut peak = 0;
    for order in 0..1_000_000u32 {
        let key = Key::builder()
            .part("run", &run)
            .and_then(|b| b.literal(":refund:"))
            .and_then(|b| b.part("order_id", &order))
            .and_then(|b| b.finish())
            .expect("key");
        let _ = Call::new("shop::refund_order", key)
            .store(&store)
            .retention(Duration::from_secs(1))
            .run(async { Ok::<_, Error>(order) })
            .await
            .expect("outcome");
        if order % 1000 == 999 {
            // A thousand calls per simulated second: about 1,000 records are
            // live at any moment.
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        peak = peak.max(store.len());
    }
    assert!(peak <= 4096, "the store grew to {peak} records");
}

async fn a_purge_removes_only_expired_records() {
    let store = Arc::new(MemoryStore::new());
    let run = fresh_run();
    for (order, retention) in [("1", Duration::ZERO), ("2", Duration::from_secs(3600))] {
        let _ = Call::new("shop::refund_order", refund_key(&run, order))
            .store(&store)
            .retention(retention)
            .run(async { Ok::<_, Error>(()) })
            .await
            .expect("outcome");
    }
    assert_eq!(store.purge_expired().await.expect("purge"), 1);
    assert_eq!(store.len(), 1);
}

async fn a_key_naming_the_run_outside_a_run_scope_is_refused() {
    let built = Key::builder().run();
    assert!(matches!(built.err(), Some(KeyError::NoRun)));
    // A guarded call reports it in its own words.
    assert!(matches!(Error::from(KeyError::NoRun), Error::MissingRun));
    let run = Run::new("run-9").expect("run");
    let key = run
        .scope(async {
            Key::builder()
                .run()
                .and_then(|b| b.literal(":refund:"))
                .and_then(|b| b.part("order_id", "1182"))
                .and_then(|b| b.finish())
        })
        .await
        .expect("key");
    assert_eq!(key.as_str(), "run-9:refund:1182");
}

fn an_empty_run_is_refused() {
    assert!(matches!(Run::new(""), Err(RunError::Empty)));
}

async fn the_default_store_can_be_switched_in_one_line() {
    let store = Arc::new(MemoryStore::new());
    idempotent_tools::set_default_store(store.clone());
    let run = fresh_run();
    let _ = Call::new("shop::refund_order", refund_key(&run, "1182"))
        .run(async { Ok::<_, Error>(()) })
        .await
        .expect("outcome");
    assert!(
        !store.is_empty(),
        "the call used the switched default store"
    );
}

async fn the_memory_store_keeps_a_nan_as_it_is_and_replays_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let run = fresh_run();
    let measure = || async { Ok::<_, RefundError>(f64::NAN) };
    let first = refund_call(&store, &run, "1182", 42)
        .run(measure())
        .await
        .expect("fresh");
    let again = refund_call(&store, &run, "1182", 42)
        .run(measure())
        .await
        .expect("replay");
    assert!(first.is_fresh() && again.is_replay());
    assert!(again.into_value().is_some_and(f64::is_nan));
}

async fn expired_records_are_swept_when_no_call_comes() {
    let memory = Arc::new(MemoryStore::sweeping_every(Duration::from_secs(60)));
    let store: Arc<dyn Store> = memory.clone();
    let run = fresh_run();
    let provider = Provider::default();
    for order in 0..500 {
        let _ = refund_call(&store, &run, &order.to_string(), 42)
            .retention(Duration::from_secs(10))
            .run(refunds(&provider, 42))
            .await
            .expect("fresh");
    }
    assert_eq!(memory.len(), 500);
    // Past the retention and one sweep, with no call in between.
    tokio::time::advance(Duration::from_secs(61)).await;
    for _ in 0..100 {
        if memory.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(memory.len(), 0, "expired records stayed without traffic");
}

/// A result whose `Clone` panics while [`REFUSE_CLONES`] is set. It
/// unwinds without the panic hook, so a passing run prints no panic.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Touchy(u64);

static REFUSE_CLONES: AtomicBool = AtomicBool::new(false);

impl Clone for Touchy {
    fn clone(&self) -> Touchy {
        if REFUSE_CLONES.load(Ordering::SeqCst) {
            std::panic::resume_unwind(Box::new("this clone is refused"));
        }
        Touchy(self.0)
    }
}

async fn a_replay_that_panics_as_its_result_is_read_can_be_polled_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (run, acted) = (fresh_run(), AtomicU64::new(0));
    let call = || {
        Call::new("shop::touchy", refund_key(&run, "1182"))
            .store(&store)
            .run(async { Ok::<_, Error>(Touchy(acted.fetch_add(1, Ordering::SeqCst) + 1)) })
    };
    assert!(call().await.expect("the first call").is_fresh());

    // The replay reads the recorded result out of the store, where that
    // clone panics. A caller that catches the panic may poll the call again:
    // it must still name its own store and key, and replay.
    let mut replay = Box::pin(call());
    let mut cx = Context::from_waker(Waker::noop());
    REFUSE_CLONES.store(true, Ordering::SeqCst);
    let panicked = catch_unwind(AssertUnwindSafe(|| replay.as_mut().poll(&mut cx)));
    REFUSE_CLONES.store(false, Ordering::SeqCst);
    assert!(panicked.is_err(), "the clone panicked");
    let Poll::Ready(again) = replay.as_mut().poll(&mut cx) else {
        panic!("a memory store answers at once");
    };
    let again = again.expect("the replay");
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.value(), Some(&Touchy(1)));
    assert_eq!(acted.load(Ordering::SeqCst), 1, "the action ran once");
}

fn a_duplicate_waits_longer_than_a_crashed_holders_lease() {
    assert!(idempotent_tools::call::DEFAULT_WAIT > idempotent_tools::call::DEFAULT_LEASE);
}

/// A trial of `case` on a current-thread runtime whose clock starts
/// paused, as `#[tokio::test(start_paused = true)]` runs it.
fn paused<F, Fut>(name: &str, case: F) -> harness::Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    harness::Trial::test(name, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .map_err(|e| harness::Failed::from(format!("a runtime: {e}")))?
            .block_on(case());
        Ok(())
    })
}

/// Trials on a paused clock: `paused!(case, ..)`.
macro_rules! paused {
    ($($case:ident),* $(,)?) => {
        vec![$(paused(stringify!($case), || $case()),)*]
    };
}

fn main() {
    let mut trials = Suite::new(|_scope| async { MemoryStore::new() })
        .with_records()
        .within_one_process()
        .trials();
    trials.extend(paused!(
        a_record_is_replayed_within_its_retention_and_forgotten_after,
        the_default_retention_outlasts_a_providers_key_memory,
        sweeping_keeps_memory_bounded_over_a_million_unique_keys,
        expired_records_are_swept_when_no_call_comes,
    ));
    trials.extend(trials!(always;
        a_purge_removes_only_expired_records,
        a_key_naming_the_run_outside_a_run_scope_is_refused,
        the_default_store_can_be_switched_in_one_line,
        the_memory_store_keeps_a_nan_as_it_is_and_replays_it,
        a_replay_that_panics_as_its_result_is_read_can_be_polled_again,
    ));
    trials.extend(trials!(plain;
        an_empty_run_is_refused,
        a_duplicate_waits_longer_than_a_crashed_holders_lease,
    ));
    harness::main(trials);
}
