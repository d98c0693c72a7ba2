//! Guarded calls to count instructions of, under `valgrind --tool=callgrind`:
//! a count does not move with the machine's load, as timings do.
//!
//! `instructions <mode> <calls>` fills a memory store with 10,000 records,
//! then makes `calls` calls of one kind: `fresh` (a new key each call, and
//! the oldest record forgotten, as the `steady` bench does), `floor` (that
//! bench's floor: the same map work on a `DashMap` with no guard), `replay` (a
//! `Copy` result) or `replay_string` (a result that owns a `String`); or a
//! peer's hit on the same refund, for comparison: `moka_hit` (`get_with` on a
//! `future::Cache`), `cached_hit` (a `#[cached]` function) or
//! `cached_hit_string` (the same, returning the receipt that owns a
//! `String`).
//! `benches/instructions.sh` runs each mode twice and prints the
//! difference per call, which leaves out the set-up.

use std::hint::black_box;
use std::sync::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use idempotent_benches::peers::{receipt_cached, refund_cached};
use idempotent_benches::{
    Network, Provider, Refund, bench_run, current_thread, plain_key, receipt_tool, refund_key,
    refund_tool, render_plain_key,
};
use idempotent_tools::{MemoryStore, records::Records};

/// The value the floor's map holds under every key.
const FLOOR: Refund = Refund {
    id: 1,
    order_id: 1,
    usd: 42,
};

/// Records in the store before the calls counted.
const STEADY: u64 = 10_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let calls: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let rt = current_thread();
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let store = Arc::new(MemoryStore::new());
    rt.block_on(async {
        let mut next = 1_000_000;
        for _ in 0..STEADY {
            next += 1;
            let outcome = refund_tool(&store, &provider, &run, next, 42).await;
            assert!(outcome.is_ok_and(|o| o.is_fresh()));
        }
        let outcome = receipt_tool(&store, &provider, &run, 1, 42).await;
        assert!(outcome.is_ok_and(|o| o.is_fresh()));
        match mode.as_str() {
            "fresh" => {
                for _ in 0..calls {
                    next += 1;
                    black_box(
                        refund_tool(&store, &provider, &run, black_box(next), 42)
                            .await
                            .ok(),
                    );
                    let oldest = refund_key(&run, next - STEADY).ok();
                    if let Some(oldest) = oldest {
                        black_box(store.forget(&oldest).await.ok());
                    }
                }
            }
            "floor" => {
                // The `steady` bench's floor: the same map work with no
                // guard, on a map of as many entries as the store holds.
                let map: DashMap<Arc<str>, Refund> = DashMap::new();
                let mut buf = String::with_capacity(64);
                let mut next = 1_000_000;
                for _ in 0..STEADY {
                    next += 1;
                    map.insert(Arc::from(render_plain_key(&mut buf, &run, next)), FLOOR);
                }
                for _ in 0..calls {
                    next += 1;
                    let key: Arc<str> =
                        Arc::from(render_plain_key(&mut buf, &run, black_box(next)));
                    if let Entry::Vacant(vacant) = map.entry(key) {
                        vacant.insert(FLOOR);
                    }
                    let oldest = render_plain_key(&mut buf, &run, next - STEADY);
                    black_box(map.remove(oldest));
                }
            }
            "replay" => {
                for _ in 0..calls {
                    black_box(
                        refund_tool(&store, &provider, &run, black_box(next), 42)
                            .await
                            .ok(),
                    );
                }
            }
            "replay_string" => {
                for _ in 0..calls {
                    black_box(
                        receipt_tool(&store, &provider, &run, black_box(1), 42)
                            .await
                            .ok(),
                    );
                }
            }
            "moka_hit" => {
                let cache: moka::future::Cache<String, Refund> = moka::future::Cache::new(10_000);
                black_box(
                    cache
                        .get_with(plain_key(&run, 1), provider.refund(1, 42))
                        .await,
                );
                for _ in 0..calls {
                    let order_id = black_box(1);
                    black_box(
                        cache
                            .get_with(plain_key(&run, order_id), provider.refund(order_id, 42))
                            .await,
                    );
                }
            }
            "cached_hit" => {
                black_box(refund_cached(&provider, &run, 1, 42).await.ok());
                for _ in 0..calls {
                    black_box(refund_cached(&provider, &run, black_box(1), 42).await.ok());
                }
            }
            "cached_hit_string" => {
                black_box(receipt_cached(&provider, &run, 1, 42).await.ok());
                for _ in 0..calls {
                    black_box(receipt_cached(&provider, &run, black_box(1), 42).await.ok());
                }
            }
            _ => {}
        }
    });
}
