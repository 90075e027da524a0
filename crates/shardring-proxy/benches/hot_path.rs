//! What the hot-key machinery adds to a request, piece by piece, next to what it avoids: a lookup in
//! the hot-key cache (`quick_cache`, 100 entries keyed by `Bytes`, hit and miss), the key hash the
//! sketch uses (xxh3 of a 20-byte key), four relaxed `fetch_add`s on a shared counter array (the
//! sketch's update), and `Instant::now()` (what the coarse clock replaces). Keys are made before the
//! timed loop.
//!
//! `cargo bench -p shardring-proxy --bench hot_path`; `SHARDRING_BENCH=quick` shortens the measurements.

#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented public functions"
)]

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion};

fn hot_path(c: &mut Criterion) {
    let keys: Vec<Bytes> = (0..100)
        .map(|i| Bytes::from(format!("user:profile:{i:07}")))
        .collect();
    let absent: Vec<Bytes> = (0..100)
        .map(|i| Bytes::from(format!("user:absent:{i:08}")))
        .collect();
    let cache: quick_cache::sync::Cache<Bytes, Bytes> = quick_cache::sync::Cache::new(128);
    for k in &keys {
        cache.insert(k.clone(), Bytes::from(vec![b'x'; 100]));
    }
    let mut g = c.benchmark_group("hot_path");
    let mut i = 0usize;
    g.bench_function("quick_cache get (hit)", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(cache.get(&keys[i][..]))
        })
    });
    g.bench_function("quick_cache get (miss)", |b| {
        b.iter(|| {
            i = (i + 1) % absent.len();
            black_box(cache.get(&absent[i][..]))
        })
    });
    g.bench_function("xxh3 of a 20-byte key", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(xxhash_rust::xxh3::xxh3_64(&keys[i]))
        })
    });
    let cells: Vec<AtomicU32> = (0..4 * 8192).map(|_| AtomicU32::new(0)).collect();
    g.bench_function("four relaxed fetch_adds (sketch update)", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let h = xxhash_rust::xxh3::xxh3_64(&keys[i]);
            let mut m = u32::MAX;
            for row in 0..4 {
                let c = &cells[row * 8192 + ((h >> (row * 16)) as usize & 8191)];
                m = m.min(c.fetch_add(1, Relaxed));
            }
            black_box(m)
        })
    });
    g.bench_function("Instant::now", |b| b.iter(|| black_box(Instant::now())));
    g.finish();
}

fn config() -> Criterion {
    let quick = std::env::var("SHARDRING_BENCH").is_ok_and(|v| v == "quick");
    let (warm, measure) = if quick { (200, 1000) } else { (1000, 3000) };
    Criterion::default()
        .warm_up_time(Duration::from_millis(warm))
        .measurement_time(Duration::from_millis(measure))
}

criterion_group! {
    name = benches;
    config = config();
    targets = hot_path
}
criterion_main!(benches);
