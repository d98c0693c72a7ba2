//! The `replay` group: a call that repeats a finished ask, beside the
//! floor's lookup and the peers' hit paths.

use std::hint::black_box;
use std::sync::Arc;

use criterion::Criterion;
use dashmap::DashMap;
use idempotent_benches::peers::{receipt_cached, refund_cached};
use idempotent_benches::{
    Network, Provider, Receipt, Refund, bench_run, current_thread, plain_key, receipt_tool, refund,
    refund_guarded, refund_tool, render_plain_key,
};
use idempotent_tools::MemoryStore;

use crate::timed;

/// A replay: every iteration repeats an ask that already finished.
pub fn replay(c: &mut Criterion) {
    let rt = current_thread();
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let order_id = 1182;
    let mut group = c.benchmark_group("replay");

    let store = Arc::new(MemoryStore::new());
    let first = rt
        .block_on(refund_guarded(&store, &provider, &run, order_id, 42))
        .unwrap_or_else(|e| panic!("the first refund: {e}"));
    assert!(first.is_fresh(), "{first:?}");
    group.bench_function("idempotent_macro", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                let outcome = refund_tool(&store, &provider, &run, black_box(order_id), 42).await;
                debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_replay()));
                black_box(outcome.ok());
            })
        })
    });
    group.bench_function("guarded_by_hand", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                let outcome =
                    refund_guarded(&store, &provider, &run, black_box(order_id), 42).await;
                debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_replay()));
                black_box(outcome.ok());
            })
        })
    });

    // The floor: look the plain key up and copy the value out.
    let map: DashMap<Arc<str>, Refund> = DashMap::new();
    let mut buf = String::with_capacity(64);
    let first = rt
        .block_on(refund(&provider, order_id, 42))
        .unwrap_or_else(|e| panic!("the first refund: {e}"));
    map.insert(Arc::from(render_plain_key(&mut buf, &run, order_id)), first);
    group.bench_function("dashmap_get_clone", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                let key = render_plain_key(&mut buf, &run, black_box(order_id));
                black_box(map.get(key).map(|r| *r));
            })
        })
    });

    let cache: moka::future::Cache<String, Refund> = moka::future::Cache::new(10_000);
    group.bench_function("moka_get_with", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                let order_id = black_box(order_id);
                let value = cache
                    .get_with(plain_key(&run, order_id), async {
                        provider.refund(order_id, 42).await
                    })
                    .await;
                black_box(value);
            })
        })
    });

    group.bench_function("cached_macro", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                black_box(
                    refund_cached(&provider, &run, black_box(order_id), 42)
                        .await
                        .ok(),
                );
            })
        })
    });

    // The same replays with a result that owns a `String`: every replay
    // clones it.
    // Another order: the refund tool's record holds 1182's key.
    let order_id = order_id + 1;
    let first = rt
        .block_on(receipt_tool(&store, &provider, &run, order_id, 42))
        .unwrap_or_else(|e| panic!("the first receipt: {e}"));
    assert!(first.is_fresh(), "{first:?}");
    group.bench_function("idempotent_macro_string", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                let outcome = receipt_tool(&store, &provider, &run, black_box(order_id), 42).await;
                debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_replay()));
                black_box(outcome.ok());
            })
        })
    });
    let receipts: moka::future::Cache<String, Receipt> = moka::future::Cache::new(10_000);
    group.bench_function("moka_get_with_string", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                let order_id = black_box(order_id);
                let value = receipts
                    .get_with(plain_key(&run, order_id), async {
                        provider.receipt(order_id, 42).await
                    })
                    .await;
                black_box(value);
            })
        })
    });
    group.bench_function("cached_macro_string", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, async |_| {
                black_box(
                    receipt_cached(&provider, &run, black_box(order_id), 42)
                        .await
                        .ok(),
                );
            })
        })
    });

    group.finish();
}
