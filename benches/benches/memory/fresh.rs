//! The `fresh` group: a call under a key never seen before, beside the
//! map work of a store with no guard.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use idempotent_benches::{
    Network, Provider, Refund, bench_run, current_thread, refund, refund_guarded,
    refund_guarded_for, refund_tool, render_plain_key,
};
use idempotent_tools::MemoryStore;

use crate::{FIRST_ORDER, FLOOR_REFUND, timed};

/// A fresh call: every iteration asks under a key never seen before.
pub fn fresh(c: &mut Criterion) {
    let rt = current_thread();
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let mut next_order = FIRST_ORDER;
    let mut group = c.benchmark_group("fresh");

    group.bench_function("unguarded", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                next_order += 1;
                black_box(refund(&provider, black_box(next_order), 42).await.ok());
            })
        })
    });

    // A new store per sample, dropped outside the timing: the store grows by
    // one record per call, as it would under a stream of new asks.
    group.bench_function("idempotent_macro", |b| {
        b.iter_custom(|iters| {
            let store = Arc::new(MemoryStore::new());
            let elapsed = timed(&rt, iters, async |_| {
                next_order += 1;
                let outcome = refund_tool(&store, &provider, &run, black_box(next_order), 42).await;
                debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_fresh()));
                black_box(outcome.ok());
            });
            drop(store);
            elapsed
        })
    });

    group.bench_function("guarded_by_hand", |b| {
        b.iter_custom(|iters| {
            let store = Arc::new(MemoryStore::new());
            let elapsed = timed(&rt, iters, async |_| {
                next_order += 1;
                let outcome =
                    refund_guarded(&store, &provider, &run, black_box(next_order), 42).await;
                debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_fresh()));
                black_box(outcome.ok());
            });
            drop(store);
            elapsed
        })
    });

    // The same, with a zero retention: the store sweeps completed records as
    // fast as they come, so it stays small and in cache, like the floor's map.
    group.bench_function("guarded_by_hand_swept", |b| {
        b.iter_custom(|iters| {
            let store = Arc::new(MemoryStore::new());
            let elapsed = timed(&rt, iters, async |_| {
                next_order += 1;
                let outcome = refund_guarded_for(
                    &store,
                    &provider,
                    &run,
                    black_box(next_order),
                    42,
                    Duration::ZERO,
                )
                .await;
                debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_fresh()));
                black_box(outcome.ok());
            });
            drop(store);
            elapsed
        })
    });

    // The floor: render the key into one `Arc<str>`, insert it with the
    // entry API, remove it. No checks, no fingerprint, no record.
    group.bench_function("dashmap_insert_remove", |b| {
        b.iter_custom(|iters| {
            let map: DashMap<Arc<str>, Refund> = DashMap::new();
            let mut buf = String::with_capacity(64);
            let value = FLOOR_REFUND;
            let elapsed = timed(&rt, iters, async |_| {
                next_order += 1;
                let key: Arc<str> =
                    Arc::from(render_plain_key(&mut buf, &run, black_box(next_order)));
                match map.entry(Arc::clone(&key)) {
                    Entry::Vacant(vacant) => {
                        vacant.insert(value);
                    }
                    Entry::Occupied(_) => unreachable!("every key is new"),
                }
                black_box(map.remove(&key));
            });
            drop(map);
            elapsed
        })
    });

    // The floor for a store that keeps its records: the same insert, into a
    // map that grows by one entry per call.
    group.bench_function("dashmap_insert_grow", |b| {
        b.iter_custom(|iters| {
            let map: DashMap<Arc<str>, Refund> = DashMap::new();
            let mut buf = String::with_capacity(64);
            let value = FLOOR_REFUND;
            let elapsed = timed(&rt, iters, async |_| {
                next_order += 1;
                let key: Arc<str> =
                    Arc::from(render_plain_key(&mut buf, &run, black_box(next_order)));
                match map.entry(key) {
                    Entry::Vacant(vacant) => {
                        vacant.insert(value);
                    }
                    Entry::Occupied(_) => unreachable!("every key is new"),
                }
            });
            drop(map);
            elapsed
        })
    });

    group.finish();
}
