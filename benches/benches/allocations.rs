//! Allocations per call, counted by a counting global allocator, for the
//! guard and for its peers. Prints a table; times nothing.
//!
//! ```sh
//! cargo bench -p idempotent-benches --bench allocations
//! ```

use std::sync::Arc;

use dashmap::DashMap;
use idempotent_benches::peers::refund_cached;
use idempotent_benches::{
    AllocationCounts, CountingAlloc, Network, Provider, Refund, allocations_per_call, bench_run,
    count_allocations, current_thread, plain_key, refund, refund_guarded, refund_key, refund_tool,
    render_plain_key,
};
use idempotent_tools::{MemoryStore, call::Fingerprint};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const WARM_UP: u64 = 100;
const CALLS: u64 = 10_000;
const FIRST_ORDER: u64 = 10_000_000;

fn row(name: &str, counts: AllocationCounts) {
    println!(
        "| {name} | {} | {} | {} | {:.3} |",
        counts.min, counts.median, counts.max, counts.mean
    );
}

/// Counts a synchronous operation `CALLS` times after a warm-up.
fn per_call_sync(mut op: impl FnMut(u64)) -> AllocationCounts {
    let rt = current_thread();
    allocations_per_call(&rt, WARM_UP, CALLS, async |i| op(i))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter naming nothing here skips all.
    if std::env::args().skip(1).any(|a| !a.starts_with('-')) {
        return;
    }
    let rt = current_thread();
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let fresh = |i| FIRST_ORDER + i;

    println!("| call | min | median | max | mean |");
    println!("|---|---|---|---|---|");

    row(
        "unguarded refund (the action alone)",
        allocations_per_call(&rt, WARM_UP, CALLS, async |i| {
            let _ = refund(&provider, fresh(i), 42).await;
        }),
    );

    let store = Arc::new(MemoryStore::new());
    row(
        "#[idempotent], fresh (memory store)",
        allocations_per_call(&rt, WARM_UP, CALLS, async |i| {
            let _ = refund_tool(&store, &provider, &run, FIRST_ORDER * 2 + i, 42).await;
        }),
    );
    row(
        "#[idempotent], replay (memory store)",
        allocations_per_call(&rt, WARM_UP, CALLS, async |_| {
            let _ = refund_tool(&store, &provider, &run, 1183, 42).await;
        }),
    );
    row(
        "Call by hand, fresh (memory store)",
        allocations_per_call(&rt, WARM_UP, CALLS, async |i| {
            let _ = refund_guarded(&store, &provider, &run, fresh(i), 42).await;
        }),
    );
    row(
        "Call by hand, replay (memory store)",
        allocations_per_call(&rt, WARM_UP, CALLS, async |_| {
            let _ = refund_guarded(&store, &provider, &run, 1182, 42).await;
        }),
    );

    row(
        "key, short (`<run>:refund:<order_id>`)",
        per_call_sync(|i| {
            let _ = refund_key(&run, fresh(i));
        }),
    );
    let long = "sku:Ünïcode/ 42-".repeat(64);
    let long_key = idempotent_tools::call::Key::builder()
        .part("run", &run)
        .and_then(|b| b.literal(":ship:"))
        .and_then(|b| b.part("items", &long))
        .and_then(|b| b.finish())
        .unwrap_or_else(|e| panic!("a valid key: {e}"));
    row(
        "key, long (1 KiB part, escaped)",
        per_call_sync(|_| {
            let _ = idempotent_tools::call::Key::builder()
                .part("run", &run)
                .and_then(|b| b.literal(":ship:"))
                .and_then(|b| b.part("items", &long))
                .and_then(|b| b.finish());
        }),
    );
    row(
        "provider key, long (SHA-256, hex)",
        per_call_sync(|_| {
            let _ = long_key.provider_key();
        }),
    );
    row(
        "fingerprint, one integer",
        per_call_sync(|i| {
            let _ = Fingerprint::builder().arg("usd", &i).map(|f| f.finish());
        }),
    );

    let map: DashMap<Arc<str>, Refund> = DashMap::new();
    let mut buf = String::with_capacity(64);
    let value = Refund {
        id: 1,
        order_id: 1,
        usd: 42,
    };
    row(
        "DashMap insert + remove (floor, fresh)",
        per_call_sync(|i| {
            let key: Arc<str> = Arc::from(render_plain_key(&mut buf, &run, fresh(i)));
            map.insert(Arc::clone(&key), value);
            map.remove(&key);
        }),
    );
    map.insert(Arc::from(render_plain_key(&mut buf, &run, 1182)), value);
    row(
        "DashMap get + clone (floor, replay)",
        per_call_sync(|_| {
            let _ = map.get(render_plain_key(&mut buf, &run, 1182)).map(|r| *r);
        }),
    );

    let cache: moka::future::Cache<String, Refund> = moka::future::Cache::new(10_000);
    row(
        "moka get_with, replay",
        allocations_per_call(&rt, WARM_UP, CALLS, async |_| {
            let _ = cache
                .get_with(plain_key(&run, 1182), provider.refund(1182, 42))
                .await;
        }),
    );
    row(
        "cached #[cached], replay",
        allocations_per_call(&rt, WARM_UP, CALLS, async |_| {
            let _ = refund_cached(&provider, &run, 1182, 42).await;
        }),
    );

    // How much of the count is the runtime's own: one empty `block_on`.
    let (_, empty) = count_allocations(|| rt.block_on(async {}));
    println!();
    println!("(an empty `block_on` makes {empty} allocations; counts above include it)");
}
