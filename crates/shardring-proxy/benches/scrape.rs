//! The cost of one scrape, not of a request: rendering the pools' counters as Prometheus text 0.0.4,
//! OpenMetrics and twemproxy's JSON, for a small proxy (1 pool × 3 servers) and a large one (10 pools ×
//! 100 servers). The request path is not measured here: it only bumps relaxed atomics, which this change
//! does not touch. The views are built before the timed loop; each iteration renders one whole scrape.
//!
//! `cargo bench -p shardring-proxy --bench scrape`; `SHARDRING_BENCH=quick` shortens the measurements.

#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented public functions"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use shardring_proxy::metrics::{
    render_openmetrics, render_prometheus, render_twemproxy_json, PoolStats, PoolView, ServerStats,
};

/// Pools of `servers` servers each, every counter non-zero and the latency histograms filled.
fn views(pools: usize, servers: usize) -> Vec<PoolView> {
    (0..pools)
        .map(|p| {
            let pool = Arc::new(PoolStats::new(&format!("pool-{p}")));
            pool.requests.add(1_000_000 + p as u64);
            pool.total_connections.add(1_000);
            let servers = (0..servers)
                .map(|s| {
                    let stats = Arc::new(ServerStats::new(&format!("10.0.{p}.{s}:11211")));
                    stats.requests.add(123_456 + s as u64);
                    stats.request_bytes.add(98_765_432);
                    for us in [40, 90, 300, 700, 2_000, 40_000, 2_000_000] {
                        stats.latency.observe(Duration::from_micros(us));
                    }
                    stats
                })
                .collect();
            PoolView {
                pool,
                servers,
                placements: Default::default(),
            }
        })
        .collect()
}

fn scrape(c: &mut Criterion) {
    let quick = std::env::var("SHARDRING_BENCH").is_ok_and(|v| v == "quick");
    let mut group = c.benchmark_group("scrape");
    if quick {
        group
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(500))
            .sample_size(20);
    }
    let started = Instant::now();
    for (pools, servers) in [(1, 3), (10, 100)] {
        let v = views(pools, servers);
        let size = format!("{pools}x{servers}");
        group.throughput(Throughput::Elements((pools * servers) as u64));
        group.bench_with_input(BenchmarkId::new("prometheus_text", &size), &v, |b, v| {
            b.iter(|| render_prometheus(started, black_box(v)))
        });
        group.bench_with_input(BenchmarkId::new("openmetrics", &size), &v, |b, v| {
            b.iter(|| render_openmetrics(started, black_box(v)))
        });
        group.bench_with_input(BenchmarkId::new("twemproxy_json", &size), &v, |b, v| {
            b.iter(|| render_twemproxy_json(started, black_box(v)))
        });
    }
    group.finish();
}

criterion_group!(benches, scrape);
criterion_main!(benches);
