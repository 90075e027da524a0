//! Our implementations as [`Subject`]s: the ring (index on, index off, and with CRC32 keys for the
//! equal-hash comparison with pingora-ketama), and every algorithm of [`Algorithm::ALL`] through
//! [`algo::build`], so algorithms added later are benchmarked without touching this file.

use shardring::algo::{self, Algorithm, AlgorithmOptions};
use shardring::{HashFunction, Node, Placement, Ring};

use crate::{Subject, VNODES};

/// Our ring over `names` with `hash`, with or without the top-bits index, built with the default
/// threads (the available parallelism, for rings of 65,536 points or more).
pub fn ring(names: &[&str], hash: HashFunction, index: bool) -> Ring {
    ring_on(names, hash, index, None)
}

/// [`ring`] with xxh3 keys and a line table (`RingBuilder::line_table`).
pub fn ring_with_lines(names: &[&str]) -> Ring {
    ring_with_lines_hashing(names, HashFunction::Xxh3)
}

/// [`ring_with_lines`] with keys hashed by `hash`.
pub fn ring_with_lines_hashing(names: &[&str], hash: HashFunction) -> Ring {
    Ring::builder()
        .vnodes(VNODES)
        .hash(hash)
        .line_table(true)
        .nodes(names.iter().copied())
        .build()
        .expect("valid ring")
}

/// [`ring`], built on `threads` threads (`None`: the default).
pub fn ring_on(names: &[&str], hash: HashFunction, index: bool, threads: Option<usize>) -> Ring {
    let mut builder = Ring::builder()
        .vnodes(VNODES)
        .hash(hash)
        .lookup_index(index);
    if let Some(threads) = threads {
        builder = builder.build_threads(threads);
    }
    builder
        .nodes(names.iter().copied())
        .build()
        .expect("valid ring")
}

impl Subject for Ring {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.lookup_index(key).expect("non-empty")
    }

    fn replicas(&self, key: &'static [u8], count: usize, out: &mut Vec<usize>) -> bool {
        self.replicas_into(key, count, out);
        true
    }

    #[inline]
    fn locate_many(&self, keys: &[&'static [u8]], out: &mut [Option<usize>]) -> bool {
        self.lookup_many(keys, out);
        true
    }
}

/// One of our algorithms behind `Box<dyn Placement>`, as [`algo::build`] returns it (a virtual call
/// per lookup that the concrete `Ring` above does not pay).
#[derive(Debug)]
pub struct Dyn(pub Box<dyn Placement>);

impl Subject for Dyn {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.0.locate(key).expect("non-empty")
    }

    fn replicas(&self, key: &'static [u8], count: usize, out: &mut Vec<usize>) -> bool {
        self.0.replicas_into(key, count, out);
        true
    }

    #[inline]
    fn locate_many(&self, keys: &[&'static [u8]], out: &mut [Option<usize>]) -> bool {
        self.0.locate_many(keys, out);
        true
    }
}

/// The options every one of our algorithms is built with: xxh3 keys, 160 points per ring node, the
/// rest at their defaults.
pub fn options() -> AlgorithmOptions {
    let mut options = AlgorithmOptions::default();
    options.hash = HashFunction::Xxh3;
    options.vnodes = VNODES;
    options
}

/// `Node`s of weight 1 for `names`.
pub fn nodes(names: &[&str]) -> Vec<Node> {
    names
        .iter()
        .map(|n| Node::new(*n).expect("valid name"))
        .collect()
}

/// Every algorithm but the ring (which is measured as the concrete [`Ring`]).
pub fn algorithms() -> impl Iterator<Item = Algorithm> {
    Algorithm::ALL
        .iter()
        .copied()
        .filter(|a| *a != Algorithm::Ring)
}

/// `algorithm` built over `nodes` by [`algo::build`].
pub fn build(algorithm: Algorithm, nodes: &[Node]) -> Dyn {
    Dyn(algo::build(algorithm, nodes, &options()).expect("valid placement"))
}

/// The implementation name in reports: `shardring-<algo>`.
pub fn impl_name(algorithm: Algorithm) -> String {
    format!("shardring-{}", algorithm.name())
}
