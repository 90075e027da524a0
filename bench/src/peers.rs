//! The peer crates, each configured as alike to ours as its API allows: 160 points per node for the
//! rings, xxh3-64 of the key wherever the hash is pluggable, fixed seeds. [`NOTES`] lists where a peer
//! cannot be alike.

#![allow(
    missing_debug_implementations,
    reason = "the wrapped peer types do not implement Debug"
)]

use std::hash::{Hash, Hasher};
use std::net::SocketAddr;

use crate::{fmix64, Family, RawKey, Subject, Xxh3Build, Xxh3Hasher, VNODES};

/// A peer's report name, family, the largest node count it is measured at, and how it differs from
/// ours.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The crate name and version, as reports show it.
    pub name: &'static str,
    /// What it is compared against.
    pub family: Family,
    /// The key hash it uses in these benchmarks.
    pub hash: &'static str,
    /// The most nodes it is measured at (some peers cannot be built beyond).
    pub max_nodes: usize,
    /// The largest node count its *build* is timed at.
    pub max_build_nodes: usize,
    /// Where its configuration cannot be like ours.
    pub note: &'static str,
}

/// Every peer, in report order.
pub const NOTES: &[Peer] = &[
    Peer {
        name: "pingora-ketama",
        family: Family::Ring,
        hash: "crc32",
        max_nodes: usize::MAX,
        max_build_nodes: usize::MAX,
        note: "Hash not pluggable: CRC32 for keys and points (nginx's ketama), so it is compared with \
               `shardring-ring-crc32`, our ring with CRC32 keys. 160 points per node (fixed); each \
               point is a CRC32 of 4 bytes continued from the node's hash state, cheaper than hashing \
               a whole point name as our plain scheme and the other ring peers do. Nodes \
               must be `SocketAddr`s; u16 node indices. `node_iter` repeats nodes, so replicas skip \
               repeats in the benchmark's loop.",
    },
    Peer {
        name: "hashring",
        family: Family::Ring,
        hash: "xxh3",
        max_nodes: usize::MAX,
        max_build_nodes: usize::MAX,
        note: "No virtual nodes of its own: 160 `(name, i)` nodes per server are added with \
               `batch_add`, each positioned at xxh3-64 of `name-i` (our point names) on a 64-bit \
               circle. Each point stores the node value (24 bytes here) beside its 8-byte position. \
               `get_with_replicas` clones the whole ring per call and does not skip repeated \
               servers, so it is not benchmarked for replicas.",
    },
    Peer {
        name: "conhash",
        family: Family::Ring,
        hash: "xxh3",
        max_nodes: usize::MAX,
        max_build_nodes: 1000,
        note: "Hash pluggable only as `fn(&[u8]) -> Vec<u8>`: xxh3-64 as 8 big-endian bytes, so each \
               lookup allocates. Points in a `BTreeMap<Vec<u8>, N>` named `name:i` (its format). \
               No replica API. A build at 10,000 nodes takes about 7 s on this machine, so its build is \
               timed up to 1000 nodes.",
    },
    Peer {
        name: "consistent_hash_ring",
        family: Family::Ring,
        hash: "xxh3",
        max_nodes: 1000,
        max_build_nodes: 100,
        note: "xxh3 through `BuildHasher`; 160 vnodes, positioned by re-hashing the node's hash \
               (its scheme). Every vnode is inserted into a sorted `Vec` (quadratic build): 1000 \
               nodes take about 6 s here, so its build is timed up to 100 nodes and it is not \
               measured at 10,000 nodes.",
    },
    Peer {
        name: "mpchash",
        family: Family::MultiProbe,
        hash: "xxh3",
        max_nodes: usize::MAX,
        max_build_nodes: usize::MAX,
        note: "Multi-probe: one point per node and 23 probes per key (fixed; ours uses 21), \
               positions from xxh3 seeded through `std::hash` (not pluggable), points in a \
               crossbeam skip list. Its replicas walk clockwise from the key's first probe, so the \
               first is not always its lookup's answer.",
    },
    Peer {
        name: "jumphash",
        family: Family::Jump,
        hash: "xxh3",
        max_nodes: usize::MAX,
        max_build_nodes: usize::MAX,
        note: "`CustomJumpHasher` with xxh3; no node names (buckets are numbers). No replica API.",
    },
    Peer {
        name: "maglev",
        family: Family::Maglev,
        hash: "xxh3",
        max_nodes: 1000,
        max_build_nodes: 1000,
        note: "xxh3 through `BuildHasher` (salted per use), table size set to ours (the next prime \
               at or above max(100 x nodes, 65,537)). Its build materialises every node's whole \
               permutation (nodes x table size x 8 bytes: 80 GB at 10,000 nodes), so it is not \
               measured at 10,000 nodes. No replica API.",
    },
    Peer {
        name: "anchorhash",
        family: Family::Anchor,
        hash: "xxh3",
        max_nodes: usize::MAX,
        max_build_nodes: usize::MAX,
        note: "xxh3 through `BuildHasher`, truncated to 32 bits (its API); capacity twice the node \
               count like ours; u16 capacity (at most 65,535 nodes). No replica API.",
    },
    Peer {
        name: "rendezvous_hash",
        family: Family::Rendezvous,
        hash: "xxh3",
        max_nodes: usize::MAX,
        max_build_nodes: usize::MAX,
        note: "A `NodeHasher` that scores like ours (fmix64 of xxh3(key) xor the node's seed), but \
               its API hashes the key again for every node, and `calc_candidates` allocates and \
               sorts all N candidates per lookup.",
    },
];

/// The peer named `name`.
pub fn peer(name: &str) -> &'static Peer {
    NOTES.iter().find(|p| p.name == name).expect("known peer")
}

/// `SocketAddr`s of the node names, for pingora-ketama (parsed outside timed loops).
pub fn addresses(names: &[&str]) -> Vec<SocketAddr> {
    names.iter().map(|n| n.parse().expect("address")).collect()
}

/// An address packed into an integer, as pingora-ketama's lookups answer with addresses.
#[inline]
fn addr_id(addr: SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(v4) => ((u32::from(*v4.ip()) as usize) << 16) | usize::from(v4.port()),
        SocketAddr::V6(v6) => v6.port() as usize,
    }
}

/// pingora-ketama 0.9's `Continuum`.
pub struct Pingora(pub pingora_ketama::Continuum);

impl Pingora {
    /// Builds over `buckets` (made by [`Pingora::buckets`] outside the timed loop).
    pub fn build(buckets: &[pingora_ketama::Bucket]) -> Pingora {
        Pingora(pingora_ketama::Continuum::new(buckets))
    }

    /// Weight-1 buckets for the node names.
    pub fn buckets(names: &[&str]) -> Vec<pingora_ketama::Bucket> {
        addresses(names)
            .into_iter()
            .map(|a| pingora_ketama::Bucket::new(a, 1))
            .collect()
    }
}

impl Subject for Pingora {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        addr_id(self.0.node(key).expect("non-empty"))
    }

    fn replicas(&self, key: &'static [u8], count: usize, out: &mut Vec<usize>) -> bool {
        out.clear();
        for addr in self.0.node_iter(key) {
            let id = addr_id(*addr);
            if !out.contains(&id) {
                out.push(id);
                if out.len() == count {
                    break;
                }
            }
        }
        true
    }
}

/// A hashring point: a server and the number of its virtual node.
#[derive(Debug, Clone, Copy)]
pub struct VNode {
    /// The server's name.
    name: &'static str,
    /// The server's index.
    index: u32,
    /// Which of its 160 points.
    replica: u32,
}

impl Hash for VNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // `name-i`, our point names, written once so the position is xxh3_64 of it.
        // Formatted on the stack, as our ring does (names here are at most 20 bytes).
        let mut buf = [0u8; 64];
        let mut len = self.name.len();
        buf[..len].copy_from_slice(self.name.as_bytes());
        buf[len] = b'-';
        len += 1;
        let mut digits = [0u8; 10];
        let mut n = self.replica;
        let mut d = digits.len();
        loop {
            d -= 1;
            digits[d] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        buf[len..len + digits.len() - d].copy_from_slice(&digits[d..]);
        len += digits.len() - d;
        state.write(&buf[..len]);
    }
}

/// hashring 0.3's `HashRing` with 160 `VNode`s per server.
pub struct HashRing(pub hashring::HashRing<VNode, Xxh3Build>);

impl HashRing {
    /// Builds over the node names.
    pub fn build(names: &'static [&'static str]) -> HashRing {
        let mut ring = hashring::HashRing::with_hasher(Xxh3Build);
        let vnodes = names
            .iter()
            .enumerate()
            .flat_map(|(index, &name)| {
                (0..VNODES).map(move |replica| VNode {
                    name,
                    index: index as u32,
                    replica,
                })
            })
            .collect();
        ring.batch_add(vnodes);
        HashRing(ring)
    }
}

impl Subject for HashRing {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.0.get(&RawKey(key)).expect("non-empty").index as usize
    }
}

/// A conhash node: its name, and its index for the chain.
#[derive(Debug, Clone, Copy)]
pub struct ConNode {
    /// The server's name.
    name: &'static str,
    /// The server's index.
    index: u32,
}

impl conhash::Node for ConNode {
    fn name(&self) -> String {
        self.name.to_string()
    }
}

/// xxh3-64 as 8 big-endian bytes (so byte order is numeric order), conhash's hash signature.
fn xxh3_be(input: &[u8]) -> Vec<u8> {
    xxhash_rust::xxh3::xxh3_64(input).to_be_bytes().to_vec()
}

/// conhash 0.5's `ConsistentHash` with 160 replicas per node.
pub struct ConHash(pub conhash::ConsistentHash<ConNode>);

impl ConHash {
    /// Builds over the node names.
    pub fn build(names: &'static [&'static str]) -> ConHash {
        let mut ring = conhash::ConsistentHash::with_hash(xxh3_be);
        for (index, &name) in names.iter().enumerate() {
            ring.add(
                &ConNode {
                    name,
                    index: index as u32,
                },
                VNODES as usize,
            );
        }
        ConHash(ring)
    }
}

impl Subject for ConHash {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.0.get(key).expect("non-empty").index as usize
    }
}

/// A node whose `Hash` is its name's bytes, written once (xxh3-64 of the name under [`Xxh3Hasher`]).
#[derive(Debug, Clone, Copy)]
pub struct Named {
    /// The server's name.
    name: &'static str,
    /// The server's index.
    index: u32,
}

impl Hash for Named {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.name.as_bytes());
    }
}

impl PartialEq for Named {
    fn eq(&self, other: &Named) -> bool {
        self.name == other.name
    }
}

impl Eq for Named {}

/// `Named` nodes for the names.
pub fn named(names: &'static [&'static str]) -> impl Iterator<Item = Named> {
    names.iter().enumerate().map(|(index, &name)| Named {
        name,
        index: index as u32,
    })
}

/// consistent_hash_ring 0.8's `Ring` with 160 vnodes per node.
pub struct ConsistentHashRing(pub consistent_hash_ring::Ring<Named, Xxh3Build>);

impl ConsistentHashRing {
    /// Builds over the node names.
    pub fn build(names: &'static [&'static str]) -> ConsistentHashRing {
        ConsistentHashRing(
            consistent_hash_ring::RingBuilder::new(Xxh3Build)
                .vnodes(VNODES as usize)
                .nodes_iter(named(names))
                .build(),
        )
    }
}

impl Subject for ConsistentHashRing {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.0.try_get(RawKey(key)).expect("non-empty").index as usize
    }

    fn replicas(&self, key: &'static [u8], count: usize, out: &mut Vec<usize>) -> bool {
        out.clear();
        out.extend(
            self.0
                .replicas(RawKey(key))
                .take(count)
                .map(|n| n.index as usize),
        );
        true
    }
}

/// mpchash 2.0's multi-probe `HashRing`, one point per node.
pub struct MpcHash(pub mpchash::HashRing<Named>);

impl MpcHash {
    /// Builds over the node names.
    pub fn build(names: &'static [&'static str]) -> MpcHash {
        let ring = mpchash::HashRing::new();
        for node in named(names) {
            ring.add(node);
        }
        MpcHash(ring)
    }
}

impl Subject for MpcHash {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.0.node(&RawKey(key)).expect("non-empty").node().index as usize
    }

    fn replicas(&self, key: &'static [u8], count: usize, out: &mut Vec<usize>) -> bool {
        // Its replicas walk clockwise from the key's first probe, one point per node, so they are
        // distinct (but the first is not always `node`'s answer, which picks the closest probe).
        out.clear();
        out.extend(
            self.0
                .replicas(&RawKey(key), count)
                .iter()
                .map(|t| t.node().index as usize),
        );
        true
    }
}

/// jumphash 0.1's `CustomJumpHasher` with xxh3, over `buckets` buckets.
pub struct JumpHash {
    /// The hasher.
    jump: jumphash::CustomJumpHasher<Xxh3Hasher>,
    /// The bucket count.
    buckets: u32,
}

impl JumpHash {
    /// Builds over `count` buckets.
    pub fn build(count: usize) -> JumpHash {
        JumpHash {
            jump: jumphash::CustomJumpHasher::new(Xxh3Hasher::default()),
            buckets: count as u32,
        }
    }
}

impl Subject for JumpHash {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.jump.slot(&RawKey(key), self.buckets) as usize
    }
}

/// maglev 0.2's `Maglev`.
pub struct MaglevPeer(pub maglev::Maglev<Named, Xxh3Build>);

impl MaglevPeer {
    /// Builds over the node names with a table of (at least) `table_size` entries.
    pub fn build(names: &'static [&'static str], table_size: usize) -> MaglevPeer {
        MaglevPeer(maglev::Maglev::with_capacity_and_hasher(
            named(names),
            table_size,
            Xxh3Build,
        ))
    }

    /// Our maglev's default table size for `nodes` nodes: the next prime at or above
    /// max(100 × nodes, 65,537); the peer rounds up to the next prime itself.
    pub fn table_size(nodes: usize) -> usize {
        (100 * nodes).max(65_537)
    }
}

impl Subject for MaglevPeer {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        use maglev::ConsistentHasher;
        self.0.get(&RawKey(key)).expect("non-empty").index as usize
    }
}

/// anchorhash 0.2's `AnchorHash` with capacity twice the node count.
pub struct AnchorPeer(pub anchorhash::AnchorHash<RawKey<'static>, u32, Xxh3Build>);

impl AnchorPeer {
    /// Builds over `count` nodes.
    pub fn build(count: usize) -> AnchorPeer {
        let capacity = (2 * count).clamp(16, usize::from(u16::MAX)) as u16;
        AnchorPeer(
            anchorhash::Builder::with_hasher(Xxh3Build)
                .with_resources(0..count as u32)
                .build(capacity),
        )
    }
}

impl Subject for AnchorPeer {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        *self.0.get_resource(RawKey(key)).expect("non-empty") as usize
    }
}

/// A rendezvous_hash node identity: its name's hash seed and its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RvId {
    /// fmix64 of xxh3(name), as our rendezvous seeds nodes.
    seed: u64,
    /// The node's index.
    index: u32,
}

/// Scores like our rendezvous: fmix64(xxh3(key) ^ seed).
#[derive(Debug, Clone, Copy, Default)]
pub struct RvHasher;

impl rendezvous_hash::NodeHasher<RvId> for RvHasher {
    #[inline]
    fn hash<T: Hash>(&self, node: &RvId, item: &T) -> u64 {
        let mut h = Xxh3Hasher::default();
        item.hash(&mut h);
        fmix64(h.finish() ^ node.seed)
    }
}

/// rendezvous_hash 0.3's `RendezvousNodes`.
pub struct RendezvousPeer(
    pub rendezvous_hash::RendezvousNodes<rendezvous_hash::IdNode<RvId>, RvHasher>,
);

impl RendezvousPeer {
    /// Builds over the node names.
    pub fn build(names: &[&str]) -> RendezvousPeer {
        let mut nodes = rendezvous_hash::RendezvousNodes::new(RvHasher);
        for (index, name) in names.iter().enumerate() {
            nodes.insert(rendezvous_hash::IdNode::new(RvId {
                seed: fmix64(xxhash_rust::xxh3::xxh3_64(name.as_bytes())),
                index: index as u32,
            }));
        }
        RendezvousPeer(nodes)
    }
}

impl Subject for RendezvousPeer {
    #[inline]
    fn locate(&self, key: &'static [u8]) -> usize {
        self.0
            .calc_candidates(&RawKey(key))
            .next()
            .expect("non-empty")
            .index as usize
    }

    fn replicas(&self, key: &'static [u8], count: usize, out: &mut Vec<usize>) -> bool {
        out.clear();
        out.extend(
            self.0
                .calc_candidates(&RawKey(key))
                .take(count)
                .map(|n| n.index as usize),
        );
        true
    }
}
