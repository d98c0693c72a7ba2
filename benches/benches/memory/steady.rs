//! The `steady` group: a fresh call into a store that holds a fixed number
//! of records, beside the floor's map and the peers' miss paths.

use std::hint::black_box;
use std::sync::Arc;

use criterion::Criterion;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use idempotent_benches::peers::refund_cached_miss;
use idempotent_benches::{
    Network, Provider, Refund, bench_run, current_thread, plain_key, refund, refund_key,
    refund_tool, render_plain_key,
};
use idempotent_tools::{MemoryStore, records::Records};

use crate::{FIRST_ORDER, FLOOR_REFUND, timed};

/// How many records the steady-state store holds throughout.
const STEADY: u64 = 100_000;

/// A fresh call in steady state: the store holds [`STEADY`] records, and
/// every iteration adds one under a new key and removes the oldest, so its
/// size never depends on how many iterations criterion picks. The floor does
/// the same map work with no guard: format the key, insert it, remove the
/// oldest (formatting its key too).
pub fn steady(c: &mut Criterion) {
    let rt = current_thread();
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let mut group = c.benchmark_group("steady");

    let mut unguarded_order = FIRST_ORDER;
    group.bench_function("unguarded", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                unguarded_order += 1;
                black_box(refund(&provider, black_box(unguarded_order), 42).await.ok());
            })
        })
    });

    let store = Arc::new(MemoryStore::new());
    let mut next = FIRST_ORDER;
    rt.block_on(async {
        for _ in 0..STEADY {
            next += 1;
            let outcome = refund_tool(&store, &provider, &run, next, 42).await;
            assert!(outcome.is_ok_and(|o| o.is_fresh()));
        }
    });
    group.bench_function("idempotent_macro", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                next += 1;
                let outcome = refund_tool(&store, &provider, &run, black_box(next), 42).await;
                debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_fresh()));
                black_box(outcome.ok());
                let oldest = refund_key(&run, next - STEADY).ok();
                if let Some(oldest) = oldest {
                    black_box(store.forget(&oldest).await.ok());
                }
            })
        })
    });
    assert_eq!(store.len() as u64, STEADY, "the store stays at its size");

    let map: DashMap<Arc<str>, Refund> = DashMap::new();
    let mut buf = String::with_capacity(64);
    let value = FLOOR_REFUND;
    let mut next_floor = FIRST_ORDER;
    for _ in 0..STEADY {
        next_floor += 1;
        map.insert(
            Arc::from(render_plain_key(&mut buf, &run, next_floor)),
            value,
        );
    }
    group.bench_function("floor_insert_remove_oldest", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                next_floor += 1;
                let key: Arc<str> =
                    Arc::from(render_plain_key(&mut buf, &run, black_box(next_floor)));
                match map.entry(key) {
                    Entry::Vacant(vacant) => {
                        vacant.insert(value);
                    }
                    Entry::Occupied(_) => unreachable!("every key is new"),
                }
                let oldest = render_plain_key(&mut buf, &run, next_floor - STEADY);
                black_box(map.remove(oldest));
            })
        })
    });
    assert_eq!(map.len() as u64, STEADY);

    // The peers' miss paths, at the same size: a new key every call, and
    // the cache evicts one entry for each it admits.
    let cache: moka::future::Cache<String, Refund> = moka::future::Cache::new(STEADY);
    let mut next_moka = FIRST_ORDER;
    group.bench_function("moka_get_with_miss", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                next_moka += 1;
                let order_id = black_box(next_moka);
                let value = cache
                    .get_with(plain_key(&run, order_id), async {
                        provider.refund(order_id, 42).await
                    })
                    .await;
                black_box(value);
            })
        })
    });

    let mut next_cached = FIRST_ORDER;
    group.bench_function("cached_macro_miss", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                next_cached += 1;
                black_box(
                    refund_cached_miss(&provider, &run, black_box(next_cached), 42)
                        .await
                        .ok(),
                );
            })
        })
    });
    group.finish();
}
