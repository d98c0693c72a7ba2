//! What the benchmarks share: the refund tool they all call, a stand-in
//! provider, and an allocator that counts.
//!
//! Every benchmark calls the same action, a refund on a stand-in provider
//! that allocates nothing, so that whatever a variant costs beyond the
//! unguarded call is the cost of the guard (or of the peer it is compared
//! with), not of the action.
#![deny(missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idempotent_tools::{
    Outcome, Run,
    call::{Call, Fingerprint, Key},
    idempotent,
    store::Store,
};
use serde::{Deserialize, Serialize};

pub mod cpu;
pub mod durable;
pub mod peers;
pub mod results;
pub mod scale;

/// The tool id the by-hand guard records.
pub const TOOL: &str = "benches::refund";

/// A refund as the provider returns it. Plain data, so cloning it (a replay)
/// allocates nothing and every allocation counted is the guard's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    /// The provider's refund number.
    pub id: u64,
    /// The order refunded.
    pub order_id: u64,
    /// The amount, in dollars.
    pub usd: u64,
}

/// The refund tool's error.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    /// The guard failed.
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// How the stand-in provider's "network" behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Answers at once: the harshest case for overhead, since the action
    /// costs nearly nothing.
    Instant,
    /// Yields to the scheduler once before answering, so concurrent
    /// duplicates really find the first call in flight.
    Yield,
}

/// A stand-in payment provider that counts the refunds that reach it.
#[derive(Debug)]
pub struct Provider {
    refunds: AtomicU64,
    network: Network,
}

impl Provider {
    /// A provider whose network behaves as `network`.
    pub fn new(network: Network) -> Provider {
        Provider {
            refunds: AtomicU64::new(0),
            network,
        }
    }

    /// Carries out a refund.
    pub async fn refund(&self, order_id: u64, usd: u64) -> Refund {
        if self.network == Network::Yield {
            tokio::task::yield_now().await;
        }
        let id = self.refunds.fetch_add(1, Ordering::Relaxed) + 1;
        Refund { id, order_id, usd }
    }

    /// How many refunds reached the provider.
    pub fn refunds(&self) -> u64 {
        self.refunds.load(Ordering::Relaxed)
    }
}

/// The refund tool with no guard: the baseline every guarded variant is
/// measured against.
pub async fn refund(provider: &Provider, order_id: u64, usd: u64) -> Result<Refund, RefundError> {
    Ok(provider.refund(order_id, usd).await)
}

/// The refund's key, `<run>:refund:<order_id>`, built as the guard builds it.
pub fn refund_key(run: &Run, order_id: u64) -> Result<Key, idempotent_tools::Error> {
    Ok(Key::builder()
        .part("run", run)?
        .literal(":refund:")?
        .part("order_id", &order_id)?
        .finish()?)
}

/// The refund tool guarded by hand with [`Call`]: key on the run and the
/// order, fingerprint the amount, keep the record for the default retention.
pub async fn refund_guarded<S: Store>(
    store: &Arc<S>,
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Outcome<Refund>, RefundError> {
    let key = refund_key(run, order_id)?;
    let fingerprint = Fingerprint::builder()
        .arg("usd", &usd)
        .map_err(idempotent_tools::Error::from)?
        .finish();
    Call::new(TOOL, key)
        .fingerprint(fingerprint)
        .store(store)
        .run(refund(provider, order_id, usd))
        .await
}

/// [`refund_guarded`], keeping the record for `retention`. A zero retention
/// lets the store sweep records as fast as they come, so it stays small.
/// The setter copies the default policy into a box for this call: one more
/// allocation than [`refund_guarded`], which a `static` policy
/// ([`Call::static_policy`]) avoids.
pub async fn refund_guarded_for<S: Store>(
    store: &Arc<S>,
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
    retention: Duration,
) -> Result<Outcome<Refund>, RefundError> {
    let key = refund_key(run, order_id)?;
    let fingerprint = Fingerprint::builder()
        .arg("usd", &usd)
        .map_err(idempotent_tools::Error::from)?
        .finish();
    Call::new(TOOL, key)
        .fingerprint(fingerprint)
        .store(store)
        .retention(retention)
        .run(refund(provider, order_id, usd))
        .await
}

/// The refund tool as users write it: `#[idempotent]` on the unguarded
/// body. The store and the provider are context, outside key and
/// fingerprint; the amount is fingerprinted.
#[idempotent(key = "<run>:refund:<order_id>", store = store, tool = "benches::refund")]
pub async fn refund_tool<S: Store>(
    #[context] store: &Arc<S>,
    #[context] provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Outcome<Refund>, RefundError> {
    Ok(provider.refund(order_id, usd).await)
}

/// A refund receipt that owns text, as most tools' results do: a replay
/// clones it, so its `String` is allocated again, which a `Copy` result
/// hides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The provider's refund number.
    pub id: u64,
    /// The order refunded.
    pub order_id: u64,
    /// The provider's message, such as `refunded 42 USD`.
    pub message: String,
}

impl Provider {
    /// Carries out a refund and writes its receipt (one allocation: the
    /// message).
    pub async fn receipt(&self, order_id: u64, usd: u64) -> Receipt {
        let refund = self.refund(order_id, usd).await;
        Receipt {
            id: refund.id,
            order_id,
            message: format!("refunded {usd} USD"),
        }
    }
}

/// The refund tool returning a [`Receipt`], through `#[idempotent]`.
#[idempotent(key = "<run>:refund:<order_id>", store = store, tool = "benches::receipt")]
pub async fn receipt_tool<S: Store>(
    #[context] store: &Arc<S>,
    #[context] provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Outcome<Receipt>, RefundError> {
    Ok(provider.receipt(order_id, usd).await)
}

/// Renders `<run>:refund:<order_id>` into `buf` with no escaping and no
/// checks: what a hand-rolled cache would key on. Reuses `buf`, so it
/// allocates only while `buf` grows.
pub fn render_plain_key<'b>(buf: &'b mut String, run: &Run, order_id: u64) -> &'b str {
    buf.clear();
    // Writing to a `String` cannot fail.
    let _ = write!(buf, "{run}:refund:{order_id}");
    buf
}

/// The plain key as an owned `String` (one allocation), for caches whose
/// API takes the key by value.
pub fn plain_key(run: &Run, order_id: u64) -> String {
    format!("{run}:refund:{order_id}")
}

/// A global allocator that counts the allocations made on each thread.
///
/// Install it in one benchmark or test binary with
/// `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc;`, then
/// read the count with [`count_allocations`]. Counting per thread keeps
/// other threads (the test harness, a runtime's workers) out of the count,
/// so measure on a current-thread runtime.
pub struct CountingAlloc;

thread_local! {
    // `const` and without a destructor: safe to touch from inside the
    // allocator, which must not allocate.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to the system allocator unchanged; counting
// touches only a const thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The allocations made on this thread so far. Meaningful only in a binary
/// that installed [`CountingAlloc`].
pub fn allocations() -> u64 {
    ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

/// Runs `f` and returns its result with the number of allocations (and
/// reallocations) it made on this thread.
pub fn count_allocations<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = allocations();
    let out = f();
    (out, allocations() - before)
}

/// A current-thread runtime: one guarded call at a time, on the thread that
/// counts its allocations.
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
}

/// A multi-thread runtime with one worker per core.
pub fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
}

/// The run every benchmark keys on.
pub fn bench_run() -> Run {
    Run::new("run-7f3a").unwrap_or_else(|e| panic!("a fixed run id is valid: {e}"))
}

/// Allocations per call over a series of calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocationCounts {
    /// The fewest any call made.
    pub min: u64,
    /// The typical call.
    pub median: u64,
    /// The most any call made (a call that grew a table, say).
    pub max: u64,
    /// The mean, with occasional growth amortised in.
    pub mean: f64,
}

impl AllocationCounts {
    fn of(mut per_call: Vec<u64>) -> AllocationCounts {
        per_call.sort_unstable();
        let n = per_call.len().max(1);
        AllocationCounts {
            min: per_call.first().copied().unwrap_or(0),
            median: per_call.get(per_call.len() / 2).copied().unwrap_or(0),
            max: per_call.last().copied().unwrap_or(0),
            mean: per_call.iter().sum::<u64>() as f64 / n as f64,
        }
    }
}

/// Counts the allocations of each of `calls` calls, the `i`-th awaiting
/// `call(i)` on `rt`, after `warm_up` uncounted calls (thread-local buffers
/// and lazily built statics are allocated once, not per call).
pub fn allocations_per_call(
    rt: &tokio::runtime::Runtime,
    warm_up: u64,
    calls: u64,
    mut call: impl AsyncFnMut(u64),
) -> AllocationCounts {
    for i in 0..warm_up {
        rt.block_on(call(i));
    }
    let per_call = (warm_up..warm_up + calls)
        .map(|i| count_allocations(|| rt.block_on(call(i))).1)
        .collect();
    AllocationCounts::of(per_call)
}
