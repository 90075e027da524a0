//! Ring lookups and builds at 10, 100 and 1000 nodes × 160 points.
//!
//! Keys are made before the timed loop; each iteration looks up one key of a fixed pool of random
//! 16-byte keys, so the measurement is hash + search.

#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented public functions"
)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use shardring::Ring;

fn node_names(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("10.0.{}.{}:11211", i / 256, i % 256))
        .collect()
}

/// A fixed pool of pseudo-random keys (SplitMix64 over a fixed seed), made outside any timed loop.
fn keys(count: usize, len: usize) -> Vec<Vec<u8>> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..count)
        .map(|_| (0..len).map(|_| next() as u8).collect())
        .collect()
}

fn lookup(c: &mut Criterion) {
    let pool = keys(4096, 16);
    let mut group = c.benchmark_group("ring/lookup");
    group.throughput(Throughput::Elements(1));
    for nodes in [10usize, 100, 1000] {
        let ring = Ring::builder().nodes(node_names(nodes)).build().unwrap();
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &ring, |b, ring| {
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(ring.lookup(black_box(&pool[i])))
            })
        });
    }
    group.finish();
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("ring/build");
    group.sample_size(10);
    for nodes in [10usize, 100, 1000] {
        let names = node_names(nodes);
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &names, |b, names| {
            b.iter(|| {
                Ring::builder()
                    .nodes(names.iter().cloned())
                    .build()
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookup, build);
criterion_main!(benches);
