//! Build, lookup and replica benchmarks of our ring, every algorithm of `Algorithm::ALL`, and the peer
//! crates, at 10, 100, 1000 and 10,000 nodes (160 points per node for rings), with the bare xxh3-64 of
//! the same keys as the floor.
//!
//! Keys come from fixed pools made before any timed loop (`shardring_bench::key_pool`): the hot pool
//! of 4096 keys, whose ring positions stay cached, and the cold pool of 2,097,152 keys (32 MiB of
//! 16-byte keys), whose do not. An iteration takes the next key of the pool. Three lookup modes:
//! - `independent`: the next key does not depend on the answer, so the CPU may overlap lookups
//!   (throughput);
//! - `chain`: the next key's index depends on the previous answer, so each lookup waits for the last
//!   (latency);
//! - `batch`: 64 keys a call through the batch API (`Ring::lookup_many`, `Placement::locate_many`),
//!   ours only (no peer has one); criterion's throughput is set to 64 elements, and the report divides.
//!
//! Criterion ids are `<group>.<mode>.k<key bytes>.<pool>/<impl>/<nodes>`; `scripts/bench-report` reads them
//! back from `target/criterion/**/new/benchmark.json`. `SHARDRING_BENCH=quick` shortens every
//! measurement (the report's `--quick`).

#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented public functions"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, BenchmarkId, Criterion,
    SamplingMode, Throughput,
};
use shardring::HashFunction;
use shardring_bench::peers::{self, peer};
use shardring_bench::{
    key_pool, node_name, node_names, ours, KeyPool, Pool, Subject, KEY_BYTES, NODE_COUNTS,
};

/// Whether `SHARDRING_BENCH=quick` asks for short measurements.
fn quick() -> bool {
    std::env::var("SHARDRING_BENCH").is_ok_and(|v| v == "quick")
}

fn config() -> Criterion {
    let c = Criterion::default().without_plots();
    if quick() {
        c.warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(500))
            .sample_size(20)
    } else {
        c.warm_up_time(Duration::from_millis(1000))
            .measurement_time(Duration::from_millis(2000))
            .sample_size(50)
    }
}

/// The node counts to measure: `NODE_COUNTS`, or those listed in `SHARDRING_BENCH_NODES`
/// (comma-separated), to measure one size while working on it. Under `cargo test` (criterion runs
/// each benchmark once, without `--bench`) only the two small sizes, so tests stay quick.
fn sizes() -> Vec<usize> {
    if !std::env::args().any(|a| a == "--bench") {
        return vec![10, 100];
    }
    match std::env::var("SHARDRING_BENCH_NODES") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("SHARDRING_BENCH_NODES: node counts")
            })
            .collect(),
        Err(_) => NODE_COUNTS.to_vec(),
    }
}

/// The node counts a peer is measured at.
fn peer_sizes(name: &str, build: bool) -> impl Iterator<Item = usize> {
    let p = peer(name);
    let max = if build {
        p.max_build_nodes
    } else {
        p.max_nodes
    };
    sizes().into_iter().filter(move |&n| n <= max)
}

/// Folds a node id (an index, or pingora's packed address) into a small step for the chain over the
/// hot pool: 1 to 256 keys on.
#[inline(always)]
fn step(r: usize) -> usize {
    1 + ((r ^ (r >> 16) ^ (r >> 32)) & 0xff)
}

/// The chain's step over the cold pool: always the next key (no node id reaches bit 60), but through a
/// data dependency on the answer, so each lookup still waits for the last. A jump of up to 256 keys, as
/// over the hot pool, would add a cache miss on the key itself to every lookup; a client placing a key
/// it has just received has the key in cache.
#[inline(always)]
fn step_cold(r: usize) -> usize {
    1 + (r >> 60)
}

/// Keys per call in the batched mode: about a large multi-get's worth.
const BATCH_KEYS: usize = 64;

/// Runs the lookup benchmarks of one built subject: both pools × 16/64-byte keys × independent/chain,
/// and batched when the subject has a batch API.
fn lookups<S: Subject>(c: &mut Criterion, name: &str, nodes: usize, subject: &S) {
    let mut out = [None; BATCH_KEYS];
    let batched = subject.locate_many(&[key_pool(Pool::Hot, 16).key(0)], &mut out[..1]);
    for pool in Pool::ALL {
        for bytes in KEY_BYTES {
            let keys: &'static KeyPool = key_pool(pool, bytes);
            for chain in [false, true] {
                let mode = if chain { "chain" } else { "independent" };
                let mut group =
                    c.benchmark_group(format!("lookup.{mode}.k{bytes}.{}", pool.name()));
                bench_lookup(&mut group, name, nodes, subject, keys, pool, chain);
                group.finish();
            }
            if batched {
                let mut group = c.benchmark_group(format!("lookup.batch.k{bytes}.{}", pool.name()));
                group.throughput(Throughput::Elements(BATCH_KEYS as u64));
                group.bench_function(BenchmarkId::new(name, nodes), |b| {
                    let mut i = 0usize;
                    b.iter(|| {
                        let batch: [&'static [u8]; BATCH_KEYS] =
                            std::array::from_fn(|j| keys.key(i.wrapping_add(j)));
                        i = i.wrapping_add(BATCH_KEYS);
                        subject.locate_many(black_box(&batch), &mut out);
                        out[BATCH_KEYS - 1]
                    })
                });
                group.finish();
            }
        }
    }
}

fn bench_lookup<S: Subject>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    nodes: usize,
    subject: &S,
    keys: &'static KeyPool,
    pool: Pool,
    chain: bool,
) {
    group.bench_function(BenchmarkId::new(name, nodes), |b| {
        let mut i = 0usize;
        if chain {
            let mut r = 0usize;
            let step = if pool == Pool::Hot { step } else { step_cold };
            b.iter(|| {
                i = i.wrapping_add(step(r));
                r = subject.locate(keys.key(i));
                r
            })
        } else {
            b.iter(|| {
                i = i.wrapping_add(1);
                subject.locate(black_box(keys.key(i)))
            })
        }
    });
}

/// Three distinct replicas per key, 16-byte keys, independent, over both pools.
fn replicas<S: Subject>(c: &mut Criterion, name: &str, nodes: usize, subject: &S) {
    let mut out = Vec::with_capacity(8);
    for pool in Pool::ALL {
        let keys = key_pool(pool, 16);
        if !subject.replicas(keys.key(0), 3, &mut out) {
            return;
        }
        let mut group = c.benchmark_group(format!("replicas.independent.k16.{}", pool.name()));
        group.bench_function(BenchmarkId::new(name, nodes), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = i.wrapping_add(1);
                subject.replicas(black_box(keys.key(i)), 3, &mut out);
                out.len()
            })
        });
        group.finish();
    }
}

/// Lookups and replicas of one subject.
fn all<S: Subject>(c: &mut Criterion, name: &str, nodes: usize, subject: &S) {
    lookups(c, name, nodes, subject);
    replicas(c, name, nodes, subject);
}

/// The floor: xxh3-64 of the same keys, both pools and modes. Measured right before the 1000-node
/// lookups (the size the targets are set at), so floor and ring see the same machine load.
fn hash(c: &mut Criterion) {
    for pool in Pool::ALL {
        for bytes in KEY_BYTES {
            let keys = key_pool(pool, bytes);
            for chain in [false, true] {
                let mode = if chain { "chain" } else { "independent" };
                let mut group = c.benchmark_group(format!("hash.{mode}.k{bytes}.{}", pool.name()));
                // xxh3, our default; CRC-32 (crc32fast), the hash of the crc32 ring comparisons, and CRC-32 as
                // our ring computes it. Each is
                // a closure of its own type, so the timed loop calls it inline, not through a pointer.
                bench_hash(
                    &mut group,
                    "xxh3",
                    keys,
                    pool,
                    chain,
                    xxhash_rust::xxh3::xxh3_64,
                );
                bench_hash(&mut group, "crc32", keys, pool, chain, |key| {
                    u64::from(crc32fast::hash(key))
                });
                // The same CRC-32 as our crc32 ring computes it (tables for short keys).
                bench_hash(&mut group, "crc32-shardring", keys, pool, chain, |key| {
                    u64::from(shardring::hash::crc32(key))
                });
                group.finish();
            }
        }
    }
}

/// One bare hash over a key pool: independent calls, or a chain where the next key depends on the
/// last hash (with the lookups' steps).
fn bench_hash(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    keys: &KeyPool,
    pool: Pool,
    chain: bool,
    hash: impl Fn(&[u8]) -> u64,
) {
    group.bench_function(BenchmarkId::new(name, "-"), |b| {
        let mut i = 0usize;
        if chain {
            let mut r = 0usize;
            // The cold step expects node ids below bit 60; a hash spans all 64 bits.
            let (step, mask) = if pool == Pool::Hot {
                (step as fn(usize) -> usize, usize::MAX)
            } else {
                (step_cold as fn(usize) -> usize, 0xffff_ffff)
            };
            b.iter(|| {
                i = i.wrapping_add(step(r));
                r = hash(keys.key(i)) as usize & mask;
                r
            })
        } else {
            b.iter(|| {
                i = i.wrapping_add(1);
                hash(black_box(keys.key(i)))
            })
        }
    });
}

/// Lookups and replicas at every size, one subject built at a time.
fn lookup(c: &mut Criterion) {
    let sizes = sizes();
    let floor_at = if sizes.contains(&1000) {
        1000
    } else {
        sizes[0]
    };
    for nodes in sizes {
        let names = node_names(nodes);
        if nodes == floor_at {
            hash(c);
        }

        let ring = ours::ring(names, HashFunction::Xxh3, true);
        all(c, "shardring-ring", nodes, &ring);
        drop(ring);
        let ring = ours::ring_with_lines(names);
        all(c, "shardring-ring-lines", nodes, &ring);
        drop(ring);
        let ring = ours::ring(names, HashFunction::Xxh3, false);
        all(c, "shardring-ring-bsearch", nodes, &ring);
        drop(ring);
        let ring = ours::ring(names, HashFunction::Crc32, true);
        all(c, "shardring-ring-crc32", nodes, &ring);
        drop(ring);
        let ring = ours::ring_with_lines_hashing(names, HashFunction::Crc32);
        all(c, "shardring-ring-lines-crc32", nodes, &ring);
        drop(ring);

        let members = ours::nodes(names);
        for algorithm in ours::algorithms() {
            let placement = ours::build(algorithm, &members);
            all(c, &ours::impl_name(algorithm), nodes, &placement);
        }

        let buckets = peers::Pingora::buckets(names);
        all(c, "pingora-ketama", nodes, &peers::Pingora::build(&buckets));
        all(c, "hashring", nodes, &peers::HashRing::build(names));
        all(c, "conhash", nodes, &peers::ConHash::build(names));
        if nodes <= peer("consistent_hash_ring").max_nodes {
            let ring = peers::ConsistentHashRing::build(names);
            all(c, "consistent_hash_ring", nodes, &ring);
        }
        all(c, "mpchash", nodes, &peers::MpcHash::build(names));
        all(c, "jumphash", nodes, &peers::JumpHash::build(nodes));
        if nodes <= peer("maglev").max_nodes {
            let table = peers::MaglevPeer::table_size(nodes);
            all(c, "maglev", nodes, &peers::MaglevPeer::build(names, table));
        }
        all(c, "anchorhash", nodes, &peers::AnchorPeer::build(nodes));
        all(
            c,
            "rendezvous_hash",
            nodes,
            &peers::RendezvousPeer::build(names),
        );
    }
}

/// Full builds, and adding one node to a built ring.
fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("build.full");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    for nodes in sizes() {
        let names = node_names(nodes);
        // The default builds on the calling thread; `-threads` on every available core. The one-thread
        // build goes first: measured after the threaded builds in the same process, it comes out
        // about 10% slower, for a reason not pinned down (the heap's layout after them, perhaps); the
        // threaded builds and the peers measure the same in either order.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for (label, hash, index, threads) in [
            ("shardring-ring", HashFunction::Xxh3, true, None),
            (
                "shardring-ring-threads",
                HashFunction::Xxh3,
                true,
                Some(cores),
            ),
            ("shardring-ring-bsearch", HashFunction::Xxh3, false, None),
            ("shardring-ring-crc32", HashFunction::Crc32, true, None),
        ] {
            group.bench_function(BenchmarkId::new(label, nodes), |b| {
                b.iter(|| ours::ring_on(black_box(names), hash, index, threads))
            });
        }
        group.bench_function(BenchmarkId::new("shardring-ring-lines", nodes), |b| {
            b.iter(|| ours::ring_with_lines(black_box(names)))
        });
        let members = ours::nodes(names);
        for algorithm in ours::algorithms() {
            group.bench_function(BenchmarkId::new(ours::impl_name(algorithm), nodes), |b| {
                b.iter(|| ours::build(algorithm, black_box(&members)))
            });
        }
    }
    let buckets: Vec<_> = sizes()
        .into_iter()
        .map(|n| (n, peers::Pingora::buckets(node_names(n))))
        .collect();
    for (nodes, buckets) in &buckets {
        group.bench_function(BenchmarkId::new("pingora-ketama", nodes), |b| {
            b.iter(|| peers::Pingora::build(black_box(buckets)))
        });
    }
    macro_rules! peer_build {
        ($name:literal, |$names:ident, $nodes:ident| $build:expr) => {
            for $nodes in peer_sizes($name, true) {
                let $names = node_names($nodes);
                group.bench_function(BenchmarkId::new($name, $nodes), |b| b.iter(|| $build));
            }
        };
    }
    peer_build!("hashring", |names, nodes| peers::HashRing::build(
        black_box(names)
    ));
    peer_build!("conhash", |names, nodes| peers::ConHash::build(black_box(
        names
    )));
    peer_build!("consistent_hash_ring", |names, nodes| {
        peers::ConsistentHashRing::build(black_box(names))
    });
    peer_build!("mpchash", |names, nodes| peers::MpcHash::build(black_box(
        names
    )));
    peer_build!("jumphash", |names, nodes| {
        let _ = names;
        peers::JumpHash::build(black_box(nodes))
    });
    peer_build!("maglev", |names, nodes| {
        peers::MaglevPeer::build(black_box(names), peers::MaglevPeer::table_size(nodes))
    });
    peer_build!("anchorhash", |names, nodes| {
        let _ = names;
        peers::AnchorPeer::build(black_box(nodes))
    });
    peer_build!("rendezvous_hash", |names, nodes| {
        peers::RendezvousPeer::build(black_box(names))
    });
    group.finish();

    // Adding one node (160 points) to a built ring; the ring is cloned outside the timed part.
    let mut group = c.benchmark_group("build.add-one");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(if quick() { 20 } else { 50 });
    for nodes in sizes() {
        let names = node_names(nodes);
        let extra = node_name(nodes);
        for (label, base) in [
            (
                "shardring-ring",
                ours::ring(names, HashFunction::Xxh3, true),
            ),
            (
                "shardring-ring-bsearch",
                ours::ring(names, HashFunction::Xxh3, false),
            ),
            ("shardring-ring-lines", ours::ring_with_lines(names)),
        ] {
            group.bench_function(BenchmarkId::new(label, nodes), |b| {
                b.iter_batched_ref(
                    || base.clone(),
                    |ring| ring.add(extra.as_str(), 1.0).expect("new node"),
                    BatchSize::LargeInput,
                )
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = build, lookup
}
criterion_main!(benches);
