//! Building keys: rendering a template's parts (with their percent-encoding),
//! reducing a long key to the provider's 255 characters, the SHA-256 durable
//! stores index on, and the arguments' fingerprint.
//!
//! ```sh
//! cargo bench -p idempotent-benches --bench keys -- --warm-up-time 1 --measurement-time 3
//! ```

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use idempotent_benches::{bench_run, plain_key, refund_key};
use idempotent_tools::{
    Run,
    call::{Fingerprint, Key, KeyError},
};

/// A short key as most tools write it: `<run>:refund:<order_id>`.
fn short(run: &Run) -> Key {
    refund_key(run, 1182).unwrap_or_else(|e| panic!("a valid key: {e}"))
}

/// A long part: about 1 KiB of text, a third of whose bytes need escaping
/// (`:`, `/`, spaces and two-byte UTF-8).
fn long_value() -> String {
    "sku:Ünïcode/ 42-".repeat(64)
}

fn long_key(run: &Run, value: &str) -> Result<Key, KeyError> {
    Key::builder()
        .part("run", run)?
        .literal(":ship:")?
        .part("items", value)?
        .finish()
}

fn keys(c: &mut Criterion) {
    let run = bench_run();
    let long = long_value();

    let mut group = c.benchmark_group("key/render");
    group.bench_function("short", |b| {
        b.iter(|| refund_key(black_box(&run), black_box(1182)))
    });
    group.bench_function("short_format_peer", |b| {
        b.iter(|| plain_key(black_box(&run), black_box(1182)))
    });
    group.throughput(Throughput::Bytes(long.len() as u64));
    group.bench_function("long", |b| {
        b.iter(|| long_key(black_box(&run), black_box(&long)))
    });
    group.finish();

    let short_key = short(&run);
    let long_key = long_key(&run, &long).unwrap_or_else(|e| panic!("a valid key: {e}"));
    let mut group = c.benchmark_group("key/provider_key");
    for (name, key) in [("short", &short_key), ("long", &long_key)] {
        group.bench_with_input(BenchmarkId::from_parameter(name), key, |b, key| {
            b.iter(|| black_box(key).provider_key().len())
        });
    }
    group.finish();

    let mut group = c.benchmark_group("key/digest");
    for (name, key) in [("short", &short_key), ("long", &long_key)] {
        group.bench_with_input(BenchmarkId::from_parameter(name), key, |b, key| {
            b.iter(|| black_box(key).digest())
        });
    }
    group.finish();

    let mut group = c.benchmark_group("fingerprint");
    group.bench_function("one_integer", |b| {
        b.iter(|| {
            Fingerprint::builder()
                .arg("usd", black_box(&42u64))
                .map(|f| f.finish())
        })
    });
    let mut lines = BTreeMap::new();
    for sku in 0..16u64 {
        lines.insert(format!("sku-{sku}"), sku * 3);
    }
    group.bench_function("map_of_16", |b| {
        b.iter(|| {
            Fingerprint::builder()
                .arg("lines", black_box(&lines))
                .map(|f| f.finish())
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = keys
}
criterion_main!(benches);
