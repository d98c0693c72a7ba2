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
    Network, Provider, Receipt, Refund, RefundError, bench_run, current_thread, plain_key,
    receipt_tool, refund, refund_guarded, refund_guarded_for, refund_key, refund_tool,
    render_plain_key,
};
use idempotent_tools::{MemoryStore, Run, Store};
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

/// How many records the steady-state store holds throughout.
const STEADY: u64 = 100_000;

#[cached(
    max_size = 100_000,
    key = "String",
    convert = r#"{ plain_key(run, order_id) }"#
)]
async fn refund_cached_miss(
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Refund, RefundError> {
    let _ = run;
    refund(provider, order_id, usd).await
}

/// A fresh call in steady state: the store holds [`STEADY`] records, and
/// every iteration adds one under a new key and removes the oldest, so its
/// size never depends on how many iterations criterion picks. The floor does
/// the same map work with no guard: format the key, insert it, remove the
/// oldest (formatting its key too).
fn steady(c: &mut Criterion) {
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
    let value = Refund {
        id: 1,
        order_id: 1,
        usd: 42,
    };
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

#[cached(
    max_size = 10_000,
    key = "String",
    convert = r#"{ plain_key(run, order_id) }"#
)]
async fn receipt_cached(
    provider: &Provider,
    run: &Run,
    order_id: u64,
    usd: u64,
) -> Result<Receipt, RefundError> {
    let _ = run;
    Ok(provider.receipt(order_id, usd).await)
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
    targets = steady, fresh, replay
}
criterion_group! {
    name = traced;
    config = Criterion::default().sample_size(30);
    targets = tracing_cost
}
criterion_main!(benches, traced);
