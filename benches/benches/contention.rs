//! Many tasks at once on a multi-thread runtime: all of them asking for the
//! same actions (one key per ask, every task asks), or each asking for its
//! own (distinct keys). Throughput is guarded calls per second.
//!
//! ```sh
//! cargo bench -p idempotent-benches --bench contention -- --warm-up-time 1 --measurement-time 3
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use idempotent_benches::{Network, Provider, bench_run, multi_thread, refund, refund_tool};
use idempotent_tools::{MemoryStore, Run};
use tokio::runtime::Runtime;

/// Calls each task makes in one round.
const CALLS_PER_TASK: u64 = 64;

/// How many tasks run at once.
const TASKS: [u64; 4] = [1, 2, 8, 64];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Every task asks for the same `CALLS_PER_TASK` refunds: each key gets
    /// one call per task, and one action.
    One,
    /// Every task asks for its own refunds: every call is a new key.
    Distinct,
}

impl Keys {
    fn name(self) -> &'static str {
        match self {
            Keys::One => "one_key",
            Keys::Distinct => "distinct_keys",
        }
    }

    fn order(self, base: u64, task: u64, call: u64) -> u64 {
        match self {
            Keys::One => base + call,
            Keys::Distinct => base + task * CALLS_PER_TASK + call,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Guarded,
    Unguarded,
}

struct Shared {
    store: Arc<MemoryStore>,
    provider: Provider,
    run: Run,
}

/// Order ids never repeat across rounds, so each round's keys are new.
static NEXT_ORDER: AtomicU64 = AtomicU64::new(10_000_000);

/// One round: `tasks` spawned tasks, each making `CALLS_PER_TASK` calls in
/// order, all joined.
async fn round(shared: &Arc<Shared>, tasks: u64, keys: Keys, variant: Variant) {
    let base = NEXT_ORDER.fetch_add(tasks * CALLS_PER_TASK, Ordering::Relaxed);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let shared = Arc::clone(shared);
            tokio::spawn(async move {
                for call in 0..CALLS_PER_TASK {
                    let order_id = keys.order(base, task, call);
                    let ok = match variant {
                        Variant::Guarded => {
                            refund_tool(&shared.store, &shared.provider, &shared.run, order_id, 42)
                                .await
                                .is_ok()
                        }
                        Variant::Unguarded => refund(&shared.provider, order_id, 42).await.is_ok(),
                    };
                    assert!(ok, "a benchmark refund failed");
                }
            })
        })
        .collect();
    for handle in handles {
        handle
            .await
            .unwrap_or_else(|e| panic!("a benchmark task failed: {e}"));
    }
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared {
        store: Arc::new(MemoryStore::new()),
        // The provider yields once, so duplicates really find the first
        // call in flight and wait for it.
        provider: Provider::new(Network::Yield),
        run: bench_run(),
    })
}

/// Checks, outside the timing, that a guarded round of this shape makes
/// exactly the actions it should: one per key.
fn check_round(rt: &Runtime, tasks: u64, keys: Keys) {
    let shared = shared();
    rt.block_on(round(&shared, tasks, keys, Variant::Guarded));
    let expected = match keys {
        Keys::One => CALLS_PER_TASK,
        Keys::Distinct => tasks * CALLS_PER_TASK,
    };
    assert_eq!(
        shared.provider.refunds(),
        expected,
        "{} with {tasks} tasks",
        keys.name()
    );
}

fn timed_rounds(rt: &Runtime, iters: u64, tasks: u64, keys: Keys, variant: Variant) -> Duration {
    // A new store per sample, dropped outside the timing.
    let shared = shared();
    let elapsed = rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            round(&shared, tasks, keys, variant).await;
        }
        start.elapsed()
    });
    drop(shared);
    elapsed
}

fn contention(c: &mut Criterion) {
    let rt = multi_thread();
    for keys in [Keys::One, Keys::Distinct] {
        let mut group = c.benchmark_group(format!("contention/{}", keys.name()));
        for tasks in TASKS {
            check_round(&rt, tasks, keys);
            group.throughput(Throughput::Elements(tasks * CALLS_PER_TASK));
            group.bench_with_input(BenchmarkId::new("guarded", tasks), &tasks, |b, &tasks| {
                b.iter_custom(|iters| timed_rounds(&rt, iters, tasks, keys, Variant::Guarded))
            });
            group.bench_with_input(BenchmarkId::new("unguarded", tasks), &tasks, |b, &tasks| {
                b.iter_custom(|iters| timed_rounds(&rt, iters, tasks, keys, Variant::Unguarded))
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = contention
}
criterion_main!(benches);
