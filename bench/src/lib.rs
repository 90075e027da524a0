//! Shared helpers of the benchmarks in `benches/` and of the `memory` binary: the fixed key pools (hot and
//! cold) and
//! node names, a std `Hasher` that is xxh3-64 (so peers with a pluggable hash hash keys exactly as we
//! do), and one [`Subject`] trait over our placements and every peer crate, each configured as alike
//! as its API allows.
//!
//! Where a peer cannot be made alike, [`peers`] says so next to its configuration, and the same notes
//! are printed into BENCHMARKS.md by `scripts/bench-report`.

pub mod ours;
pub mod peers;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Mutex, OnceLock};

/// Points (virtual nodes) per node for every ring, ours and the peers'.
pub const VNODES: u32 = 160;

/// Keys in the hot pool: a power of two, so the next index is a mask away. 4096 keys touch at most
/// 4096 ring positions, which stay in the L1/L2 caches across iterations: the figure of a workload
/// that keeps asking for the same few thousand keys, and the best case of every implementation.
pub const HOT_POOL: usize = 1 << 12;

/// Keys in the cold pool: 2,097,152 keys (32 MiB at 16 bytes, 128 MiB at 64), at least the size of
/// this machine's last-level cache (32 MiB L3), iterated cyclically. Every lookup then lands on a ring
/// position the caches have not kept: what a cache proxy or client placing millions of distinct keys
/// sees.
pub const COLD_POOL: usize = 1 << 21;

/// The node counts every group is measured at.
pub const NODE_COUNTS: [usize; 4] = [10, 100, 1000, 10_000];

/// The key lengths measured, in bytes.
pub const KEY_BYTES: [usize; 2] = [16, 64];

/// Which key pool a benchmark iterates over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// [`HOT_POOL`] keys: every structure a lookup touches stays cached.
    Hot,
    /// [`COLD_POOL`] keys: lookups miss the caches, as they do under real traffic.
    Cold,
}

impl Pool {
    /// Both pools, hot first.
    pub const ALL: [Pool; 2] = [Pool::Hot, Pool::Cold];

    /// The pool's name in benchmark ids and reports.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Hot => "hot",
            Pool::Cold => "cold",
        }
    }

    /// How many keys the pool holds.
    pub fn keys(self) -> usize {
        match self {
            Pool::Hot => HOT_POOL,
            Pool::Cold => COLD_POOL,
        }
    }
}

/// A fixed pool of pseudo-random keys of `len` bytes (SplitMix64 from a fixed seed), in one flat
/// buffer. Made once, outside every timed loop, and leaked so that peers whose key type carries a
/// lifetime (anchorhash) can take it. The hot pool is the cold pool's first [`HOT_POOL`] keys.
pub fn key_pool(pool: Pool, len: usize) -> &'static KeyPool {
    static POOLS: OnceLock<Mutex<HashMap<(Pool, usize), &'static KeyPool>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap();
    pools.entry((pool, len)).or_insert_with(|| {
        let count = pool.keys();
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ len as u64;
        let mut bytes = Vec::with_capacity(count * len + 8);
        while bytes.len() < count * len {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            bytes.extend_from_slice(&z.to_le_bytes());
        }
        bytes.truncate(count * len);
        Box::leak(Box::new(KeyPool {
            len,
            mask: count - 1,
            bytes: bytes.leak(),
        }))
    })
}

/// A pool's keys of one length, back to back.
#[derive(Debug)]
pub struct KeyPool {
    /// The length of every key.
    len: usize,
    /// The number of keys minus one (the count is a power of two).
    mask: usize,
    /// The keys, `len` bytes each.
    bytes: &'static [u8],
}

impl KeyPool {
    /// Key `i` (taken modulo the pool's size).
    #[inline(always)]
    pub fn key(&self, i: usize) -> &'static [u8] {
        let start = (i & self.mask) * self.len;
        &self.bytes[start..start + self.len]
    }

    /// The length of every key.
    pub fn key_len(&self) -> usize {
        self.len
    }

    /// How many keys the pool holds.
    pub fn len(&self) -> usize {
        self.mask + 1
    }

    /// Never: a pool holds at least one key.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The name of node `i`: `10.0.{i / 256}.{i % 256}:11211`, a memcached address (pingora-ketama
/// needs a `SocketAddr`, so every implementation gets one).
pub fn node_name(i: usize) -> String {
    format!("10.0.{}.{}:11211", i / 256, i % 256)
}

/// The names of `count` nodes, made once per count and leaked, so peers can hold `&'static str`.
pub fn node_names(count: usize) -> &'static [&'static str] {
    static NAMES: OnceLock<Mutex<HashMap<usize, &'static [&'static str]>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().unwrap();
    names.entry(count).or_insert_with(|| {
        let v: Vec<&'static str> = (0..count)
            .map(|i| &*Box::leak(node_name(i).into_boxed_str()))
            .collect();
        v.leak()
    })
}

/// A std `Hasher` computing xxh3-64, for the peers whose hash is pluggable through `BuildHasher`.
///
/// One `write` of bytes `b` gives exactly `xxh3_64(b)`, the hash our ring uses; later writes chain with
/// the previous state as the seed. `write_u32` (which maglev 0.2 calls with a fixed salt before every
/// key) sets the seed instead of hashing, so maglev's lookup costs one xxh3 too.
#[derive(Debug, Clone, Copy, Default)]
pub struct Xxh3Hasher {
    /// The seed of the next write, and the hash after the last.
    state: u64,
}

impl Hasher for Xxh3Hasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.state = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.state);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.state ^= u64::from(i);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

/// Builds [`Xxh3Hasher`]s.
#[derive(Debug, Clone, Copy, Default)]
pub struct Xxh3Build;

impl BuildHasher for Xxh3Build {
    type Hasher = Xxh3Hasher;

    #[inline]
    fn build_hasher(&self) -> Xxh3Hasher {
        Xxh3Hasher::default()
    }
}

/// A key whose `Hash` writes its bytes once, without the length prefix `[u8]`'s `Hash` adds, so a
/// `BuildHasher`-driven peer computes `xxh3_64(key)` and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawKey<'a>(pub &'a [u8]);

impl Hash for RawKey<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0);
    }
}

/// MurmurHash3's 64-bit finalizer, as our rendezvous uses it (the rendezvous peer is given the same
/// mixing).
#[inline]
pub fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// One implementation under test: built over `node_names(n)`, looked up by key.
pub trait Subject {
    /// The node that owns `key`, as a number that identifies it (an index, or an address packed into
    /// an integer), so a dependent chain can feed it into the next key's index.
    fn locate(&self, key: &'static [u8]) -> usize;

    /// Fills `out` with `count` distinct nodes for `key`, the first equal to `locate`'s; returns false
    /// when the implementation has no replica API.
    fn replicas(&self, key: &'static [u8], count: usize, out: &mut Vec<usize>) -> bool {
        let _ = (key, count, out);
        false
    }

    /// Places a batch, `out[i]` the node of `keys[i]` as [`locate`](Subject::locate) numbers it; returns
    /// false when the implementation has no batch API (no peer has one).
    fn locate_many(&self, keys: &[&'static [u8]], out: &mut [Option<usize>]) -> bool {
        let _ = (keys, out);
        false
    }
}

/// Which kind of algorithm an implementation is: ratios are taken against peers of the same family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Points on a circle, a key to the next point clockwise (virtual nodes).
    Ring,
    /// Jump consistent hash.
    Jump,
    /// Rendezvous (highest random weight).
    Rendezvous,
    /// Maglev's lookup table.
    Maglev,
    /// Multi-probe consistent hashing.
    MultiProbe,
    /// AnchorHash.
    Anchor,
    /// MementoHash.
    Memento,
}

impl Family {
    /// The family's name in reports (the same as our algorithm's `--algo` name).
    pub fn name(self) -> &'static str {
        match self {
            Family::Ring => "ring",
            Family::Jump => "jump",
            Family::Rendezvous => "rendezvous",
            Family::Maglev => "maglev",
            Family::MultiProbe => "multiprobe",
            Family::Anchor => "anchor",
            Family::Memento => "memento",
        }
    }

    /// The family of one of our algorithms.
    pub fn of(algorithm: shardring::algo::Algorithm) -> Family {
        use shardring::algo::Algorithm;
        match algorithm {
            Algorithm::Jump => Family::Jump,
            Algorithm::Rendezvous => Family::Rendezvous,
            Algorithm::Maglev => Family::Maglev,
            Algorithm::MultiProbe => Family::MultiProbe,
            Algorithm::Anchor => Family::Anchor,
            Algorithm::Memento => Family::Memento,
            _ => Family::Ring,
        }
    }
}
