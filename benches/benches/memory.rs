//! The memory store, one call at a time: a fresh call under a new key, and a
//! replay of a finished one, each beside its peers in the same run.
//!
//! ```sh
//! cargo bench -p idempotent-benches --bench memory -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cached::proc_macro::cached;
use criterion::{Criterion, criterion_group, criterion_main};
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use idempotent_benches::{
    Network, Provider, Refund, RefundError, bench_run, current_thread, plain_key, refund,
    refund_guarded, refund_guarded_for, refund_tool, render_plain_key,
};
use idempotent_tools::{MemoryStore, Run};
use tokio::runtime::Runtime;

/// Order ids with the same number of digits throughout a run, so that every
/// key renders to the same length.
const FIRST_ORDER: u64 = 10_000_000;

/// Times `iters` sequential awaits of `call` on `rt`.
fn timed(rt: &Runtime, iters: u64, mut call: impl AsyncFnMut(u64)) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for i in 0..iters {
            call(i).await;
        }
        start.elapsed()
    })
}

/// A fresh call: every iteration asks under a key never seen before.
fn fresh(c: &mut Criterion) {
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

    // The same, with a zero retention: the store sweeps finished records as
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
            let value = Refund {
                id: 1,
                order_id: 1,
                usd: 42,
            };
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
            let value = Refund {
                id: 1,
                order_id: 1,
                usd: 42,
            };
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

#[cached(
    max_size = 10_000,
    key = "String",
    convert = r#"{ plain_key(run, order_id) }"#
)]
async fn refund_cached(
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Refund, RefundError> {
    // The run is part of the cache key only.
    let _ = run;
    refund(provider, order_id, usd).await
}

/// A replay: every iteration repeats an ask that already finished.
fn replay(c: &mut Criterion) {
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

    group.finish();
}

/// The guarded call with no `tracing` subscriber installed, and with one
/// that formats every event at `info` and above into a sink: a fresh call
/// (whose events are `debug`, so filtered out) and a replay (whose event is
/// `info`, so formatted).
fn tracing_cost(c: &mut Criterion) {
    let rt = current_thread();
    let run = bench_run();
    let provider = Provider::new(Network::Instant);
    let mut next_order = FIRST_ORDER;
    let mut group = c.benchmark_group("tracing");
    let subscriber = || {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish()
    };

    for traced in [false, true] {
        let name = if traced {
            "fresh_fmt_info"
        } else {
            "fresh_no_subscriber"
        };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                // Thread-local: the current-thread runtime polls on this thread.
                let _installed = traced.then(|| tracing::subscriber::set_default(subscriber()));
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
    }

    let store = Arc::new(MemoryStore::new());
    let order_id = 1182;
    let first = rt
        .block_on(refund_guarded(&store, &provider, &run, order_id, 42))
        .unwrap_or_else(|e| panic!("the first refund: {e}"));
    assert!(first.is_fresh(), "{first:?}");
    for traced in [false, true] {
        let name = if traced {
            "replay_fmt_info"
        } else {
            "replay_no_subscriber"
        };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let _installed = traced.then(|| tracing::subscriber::set_default(subscriber()));
                timed(&rt, iters, async |_| {
                    let outcome =
                        refund_guarded(&store, &provider, &run, black_box(order_id), 42).await;
                    debug_assert!(outcome.as_ref().is_ok_and(|o| o.is_replay()));
                    black_box(outcome.ok());
                })
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = fresh, replay
}
criterion_group! {
    name = traced;
    config = Criterion::default().sample_size(30);
    targets = tracing_cost
}
criterion_main!(benches, traced);
