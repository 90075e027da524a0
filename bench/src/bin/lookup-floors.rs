//! The floors under a single cold lookup: what the loads alone cost, measured with minimal loops
//! over the bench crate's key pools, beside the library's ring with and without its line table.
//!
//! `cargo run --release -p shardring-bench --bin lookup-floors [NODES]` (1000 by default; on a shared
//! machine, run it while no other benchmark runs). Each row is the best of 5 passes over 4,194,304 keys
//! (16 bytes), independent lookups as the criterion bench's `independent` mode:
//! - `bare xxh3`: the hash alone;
//! - `two loads`: hash, the index entry of the hash's bucket, the node of the bucket's first point (the
//!   two dependent loads of a lookup through the index, without the search; wrong answers);
//! - `one load`: hash, one 64-byte line from an array the size of the line table (wrong answers);
//! - `index, branchy`: the library's search (index entry, then a scan that stops at the first point not
//!   below the hash), written out as a loop;
//! - `index, counting`: the same search counting four points at a time without a branch on them;
//! - the library's `Ring::lookup_index`, by default and with `line_table(true)`;
//! - the library's `Ring::lookup_many`, 64 keys a call as the criterion bench's `batch` mode (time per
//!   key), by default and with `line_table(true)`.
//!
//! Then, over the cold pool, a CRC-32 ring: the bare hash as `crc32fast` and as the library computes
//! it (`shardring::hash::crc32`), single lookups (`Ring::lookup_hash`) after each, and batches; then
//! the same ring with a line table.
//!
//! The hot pool runs twice: in the repeating order of the criterion bench (the same 4096 keys in the
//! same order every round, which the CPU's branch predictor learns, so the index's search looks free)
//! and in an order that changes every round (the same keys, as a hot set really arrives).

use std::hint::black_box;
use std::time::Instant;

use shardring::{HashFunction, Node, Ring};
use shardring_bench::{key_pool, node_names, ours, KeyPool, Pool};

/// Keys per pass.
const KEYS: usize = 1 << 22;

/// The points of a ring as (position, node index), and a top-bits index over them.
struct Flat {
    /// `32 - bits`.
    shift: u32,
    /// Bucket starts, as the library's index.
    starts: Vec<u32>,
    /// (position, node index), sorted.
    points: Vec<(u32, u32)>,
    /// One 64-byte line per four buckets, as big as a line table (for the one-load floor).
    entries: Vec<[u64; 8]>,
}

impl Flat {
    fn of(ring: &Ring) -> Flat {
        let base = ring.nodes().as_ptr() as usize;
        let size = std::mem::size_of::<Node>();
        let points: Vec<(u32, u32)> = ring
            .points()
            .map(|(p, n)| (p, ((n as *const Node as usize - base) / size) as u32))
            .collect();
        let bits = usize::BITS - 1 - points.len().max(1).leading_zeros();
        let shift = 32 - bits;
        let mut starts = vec![0u32; (1 << bits) + 1];
        for p in &points {
            starts[(p.0 >> shift) as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let entries = (0..1u64 << bits.saturating_sub(2))
            .map(|i| [i; 8])
            .collect();
        Flat {
            shift,
            starts,
            points,
            entries,
        }
    }

    fn node(&self, i: usize) -> usize {
        let i = if i == self.points.len() { 0 } else { i };
        self.points[i].1 as usize
    }

    fn branchy(&self, h: u32) -> usize {
        let mut i = self.starts[(h >> self.shift) as usize] as usize;
        while i < self.points.len() && self.points[i].0 < h {
            i += 1;
        }
        self.node(i)
    }

    fn counting(&self, h: u32) -> usize {
        let mut i = self.starts[(h >> self.shift) as usize] as usize;
        loop {
            let below = match self.points.get(i..i + 4) {
                Some(w) => w.iter().map(|p| usize::from(p.0 < h)).sum::<usize>(),
                None => self.points[i..].iter().filter(|p| p.0 < h).count(),
            };
            i += below;
            if below < 4 {
                return self.node(i);
            }
        }
    }

    fn two_loads(&self, h: u32) -> usize {
        self.points[self.starts[(h >> self.shift) as usize] as usize].1 as usize
    }

    fn one_load(&self, h: u32) -> usize {
        self.entries[(h >> (self.shift + 2)) as usize][(h & 7) as usize] as usize
    }
}

fn time(name: &str, keys: &KeyPool, order: Order, f: impl Fn(&[u8]) -> usize) {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let mut sum = 0usize;
        for i in 0..KEYS {
            sum = sum.wrapping_add(f(black_box(keys.key(order.index(i)))));
        }
        black_box(sum);
        best = best.min(start.elapsed().as_secs_f64() * 1e9 / KEYS as f64);
    }
    println!("{name:<30} {best:6.2} ns");
}

/// As [`time`], through [`Ring::lookup_many`] [`BATCH_KEYS`] keys a call, as the criterion bench's
/// `batch` mode: the time per key.
fn time_batched(name: &str, keys: &KeyPool, order: Order, ring: &Ring) {
    let mut best = f64::MAX;
    let mut out = [None; BATCH_KEYS];
    for _ in 0..5 {
        let start = Instant::now();
        let mut sum = 0usize;
        for i in (0..KEYS).step_by(BATCH_KEYS) {
            let batch: [&[u8]; BATCH_KEYS] = std::array::from_fn(|j| keys.key(order.index(i + j)));
            ring.lookup_many(black_box(&batch), &mut out);
            sum = sum.wrapping_add(out[BATCH_KEYS - 1].unwrap_or(0));
        }
        black_box(sum);
        best = best.min(start.elapsed().as_secs_f64() * 1e9 / KEYS as f64);
    }
    println!("{name:<30} {best:6.2} ns");
}

/// Keys per [`Ring::lookup_many`] call in [`time_batched`], as in the criterion bench.
const BATCH_KEYS: usize = 64;

/// The order a pass visits a pool's keys in.
#[derive(Clone, Copy)]
enum Order {
    /// 0, 1, 2, ...: over the hot pool the same 4096 keys in the same order every round, an order the
    /// CPU's branch predictor can learn (a search's branches then cost nothing).
    Repeating,
    /// Each round of 4096 keys in another order (the index XORed with a mask that changes every round),
    /// as a real hot set arrives: the same keys, never twice in the same sequence.
    Varying,
}

impl Order {
    #[inline(always)]
    fn index(self, i: usize) -> usize {
        match self {
            Order::Repeating => i,
            Order::Varying => i ^ ((i >> 12).wrapping_mul(0x9e37_79b9) >> 4),
        }
    }
}

fn main() {
    let nodes: usize = std::env::args()
        .nth(1)
        .map_or(Ok(1000), |n| n.parse())
        .expect("NODES: a node count");
    let names = node_names(nodes);
    let ring = ours::ring(names, HashFunction::Xxh3, true);
    let table = ours::ring_with_lines(names);
    let flat = Flat::of(&ring);
    let hash = |key: &[u8]| xxhash_rust::xxh3::xxh3_64(key) as u32;
    let cold = key_pool(Pool::Cold, 16);
    for i in 0..100_000 {
        let key = cold.key(i);
        let want = ring.lookup_index(key);
        assert_eq!(Some(flat.branchy(hash(key))), want);
        assert_eq!(Some(flat.counting(hash(key))), want);
        assert_eq!(table.lookup_index(key), want);
    }
    println!(
        "{nodes} nodes, {} points; line table kept: {}",
        flat.points.len(),
        table.has_line_table()
    );
    for (pool, order) in [
        (Pool::Hot, Order::Repeating),
        (Pool::Hot, Order::Varying),
        (Pool::Cold, Order::Repeating),
    ] {
        let keys = key_pool(pool, 16);
        let order_name = match order {
            Order::Repeating => "repeating order",
            Order::Varying => "order varying by round",
        };
        println!("-- {} pool, {order_name}", pool.name());
        time("bare xxh3", keys, order, |k| hash(k) as usize);
        time("two loads (no search)", keys, order, |k| {
            flat.two_loads(hash(k))
        });
        time("one load (no decoding)", keys, order, |k| {
            flat.one_load(hash(k))
        });
        time("index, branchy (loop)", keys, order, |k| {
            flat.branchy(hash(k))
        });
        time("index, counting (loop)", keys, order, |k| {
            flat.counting(hash(k))
        });
        time("Ring::lookup_index", keys, order, |k| {
            ring.lookup_index(k).unwrap_or(0)
        });
        time("Ring::lookup_index, line table", keys, order, |k| {
            table.lookup_index(k).unwrap_or(0)
        });
        time_batched("Ring::lookup_many (64 a call)", keys, order, &ring);
        time_batched("lookup_many, line table", keys, order, &table);
    }
    // CRC-32 keys (`hash/crc/`): the same lookups with each CRC-32 implementation, cold pool.
    let crc_ring = ours::ring(names, HashFunction::Crc32, true);
    println!("-- cold pool, CRC-32 ring");
    time("bare crc32fast", cold, Order::Repeating, |k| {
        crc32fast::hash(k) as usize
    });
    time("bare shardring::hash::crc32", cold, Order::Repeating, |k| {
        shardring::hash::crc32(k) as usize
    });
    time("lookup_hash(crc32fast)", cold, Order::Repeating, |k| {
        crc_ring
            .lookup_hash(crc32fast::hash(k))
            .map_or(0, |n| n.weight() as usize)
    });
    let crc_lines = ours::ring_with_lines_hashing(names, HashFunction::Crc32);
    for (table, crc) in [("", &crc_ring), (", line table", &crc_lines)] {
        time(
            &format!("lookup_hash(shardring crc32){table}"),
            cold,
            Order::Repeating,
            |k| {
                crc.lookup_hash(shardring::hash::crc32(k))
                    .map_or(0, |n| n.weight() as usize)
            },
        );
        time_batched(
            &format!("Ring::lookup_many{table}"),
            cold,
            Order::Repeating,
            crc,
        );
    }
}
