//! The `tracing` group: the guarded call with and without a `tracing`
//! subscriber installed.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use idempotent_benches::{
    Network, Provider, bench_run, current_thread, refund_guarded, refund_guarded_for,
};
use idempotent_tools::MemoryStore;

use crate::{FIRST_ORDER, timed};

/// The guarded call with no `tracing` subscriber installed, and with one
/// that formats every event at `info` and above into a sink: a fresh call
/// (whose events are `debug`, so filtered out) and a replay (whose event is
/// `info`, so formatted).
pub fn tracing_cost(c: &mut Criterion) {
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
