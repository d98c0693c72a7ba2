//! The memory store, one call at a time: a fresh call under a new key, and a
//! replay of a finished one, each beside its peers in the same run.
//!
//! ```sh
//! cargo bench -p idempotent-benches --bench memory -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! One module per criterion group: [`fresh`], [`steady`], [`replay`] and
//! [`tracing_cost`] (the `tracing` group).

mod fresh;
mod replay;
mod steady;
mod tracing_cost;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use idempotent_benches::Refund;
use tokio::runtime::Runtime;

/// Order ids with the same number of digits throughout a run, so that every
/// key renders to the same length.
const FIRST_ORDER: u64 = 10_000_000;

/// The value the floors' maps hold under every key.
const FLOOR_REFUND: Refund = Refund {
    id: 1,
    order_id: 1,
    usd: 42,
};

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

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = steady::steady, fresh::fresh, replay::replay
}
criterion_group! {
    name = traced;
    config = Criterion::default().sample_size(30);
    targets = tracing_cost::tracing_cost
}
criterion_main!(benches, traced);
