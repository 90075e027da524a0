//! Multi-probe consistent hashing (Appleton & O'Reilly, "Multi-probe consistent hashing", 2015).
//!
//! Each node has a single point on a 64-bit circle; each key is hashed `k` times (the probes), and the
//! key goes to the node whose point follows *any* probe most closely. One point per node keeps memory
//! at 12 bytes a node, and the `k` probes even out the arc lengths that make a one-point ring lopsided:
//! the paper reports a peak-to-mean ratio of about 1.05 with 21 probes, at the cost of `k` binary
//! searches per lookup.
//!
//! # Independent probes
//! Probe `i` is XXH3 of the key's 64-bit hash with seed `i`: a fresh, independent-looking value per
//! probe. An arithmetic sequence `h1 + i × h2` would be cheaper, but its probes are correlated: on the
//! 300,000 synthetic keys with 21 probes it gave a peak-to-mean of 1.17, 1.13 and 1.25 at 10, 100 and
//! 1000 nodes, against 1.11, 1.11 and 1.22 with independent probes (measured once, while choosing).
//!
//! # What balance to expect
//! The probes cap the *peak*: no node gets much more than its share. They do not lift the *floor*: a
//! node whose point sits just after another node's point owns a tiny arc and gets few keys whatever the
//! probes do. So the peak-to-mean ratio is good (about 1.05 plus sampling noise with 21 probes) while
//! the standard deviation stays high (17–22 % of the mean measured at 10 to 1000 nodes). Choose
//! maglev, jump or anchor when the least-loaded node matters too.
//!
//! Adding a node moves only keys to it, and removing one moves only its keys: a node's point never
//! depends on the others. Points that collide are ordered by name, and equal distances from different
//! probes go to the earlier probe, so placement never depends on insertion order.
//!
//! There are no weights: [`Error::Unsupported`] for a weight other than 1.

use crate::algo::{check_count, check_new, check_unique, name_hash, position, require_unit_weight};
use crate::hash::{HashFunction, KeyHash};
use crate::{Error, Node, Placement};

/// The default number of probes per key.
pub const DEFAULT_PROBES: u32 = 21;

/// The most probes accepted: beyond this, lookups are slow for no measurable gain.
pub const MAX_PROBES: u32 = 1024;

/// The seed of node-name hashes (a node's point).
const NODE_SEED: u64 = 0x6d75_6c74_6970_726f; // "multipro"

/// Multi-probe consistent hashing; see the [module docs](self).
///
/// ```
/// use shardring::algo::MultiProbe;
/// use shardring::{HashFunction, Node, Placement};
///
/// let nodes = ["a", "b", "c"].map(|n| Node::new(n).unwrap());
/// let mp = MultiProbe::new(&nodes, HashFunction::Xxh3, 21)?;
/// assert!(mp.lookup(b"user:7").is_some());
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct MultiProbe {
    /// The members, in the order given (removal swaps the last into the hole).
    nodes: Vec<Node>,
    /// Every node's point, sorted by (position, owner's name).
    positions: Vec<u64>,
    /// The owner (index into `nodes`) of each entry of `positions`.
    owners: Vec<u32>,
    /// Probes per key.
    probes: u32,
    /// The key hash.
    hash: HashFunction,
}

impl MultiProbe {
    /// Multi-probe hashing over `nodes` with `probes` probes per key.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`]; [`Error::Unsupported`] for weights; [`Error::InvalidSetting`] for
    /// probes outside `1..=1024`.
    pub fn new(nodes: &[Node], hash: HashFunction, probes: u32) -> Result<MultiProbe, Error> {
        if !(1..=MAX_PROBES).contains(&probes) {
            return Err(Error::InvalidSetting {
                setting: "probes",
                reason: format!("{probes} is outside 1..={MAX_PROBES}"),
            });
        }
        check_unique(nodes)?;
        check_count(nodes.len())?;
        for node in nodes {
            require_unit_weight("multiprobe", node)?;
        }
        let mut mp = MultiProbe {
            nodes: nodes.to_vec(),
            positions: Vec::new(),
            owners: Vec::new(),
            probes,
            hash,
        };
        mp.rebuild();
        Ok(mp)
    }

    /// The number of probes per key.
    pub fn probes(&self) -> u32 {
        self.probes
    }

    fn rebuild(&mut self) {
        let mut points: Vec<(u64, u32)> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (name_hash(n.name(), NODE_SEED), i as u32))
            .collect();
        let nodes = &self.nodes;
        points.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| nodes[a.1 as usize].name().cmp(nodes[b.1 as usize].name()))
        });
        self.positions = points.iter().map(|p| p.0).collect();
        self.owners = points.iter().map(|p| p.1).collect();
    }

    /// Probe `i` of a key hash.
    #[inline]
    fn probe(key_hash: u64, i: u32) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(&key_hash.to_le_bytes(), u64::from(i))
    }

    /// The index into `positions` of the first point at or after `p`, wrapping.
    #[inline]
    fn successor(&self, p: u64) -> usize {
        let i = self.positions.partition_point(|&x| x < p);
        if i == self.positions.len() {
            0
        } else {
            i
        }
    }

    /// The index into `positions` of the winning point for a key hash.
    #[inline]
    fn winning_point(&self, key_hash: u64) -> Option<usize> {
        if self.positions.is_empty() {
            return None;
        }
        let mut best = 0;
        let mut best_distance = u64::MAX;
        for i in 0..self.probes {
            let p = MultiProbe::probe(key_hash, i);
            let s = self.successor(p);
            let distance = self.positions[s].wrapping_sub(p);
            if distance < best_distance {
                best_distance = distance;
                best = s;
            }
        }
        Some(best)
    }

    /// The owner of a key already hashed with [`KeyHash::hash64`].
    #[inline]
    pub fn locate_hash(&self, key_hash: u64) -> Option<usize> {
        self.winning_point(key_hash)
            .map(|s| self.owners[s] as usize)
    }
}

impl Placement for MultiProbe {
    fn algorithm(&self) -> &'static str {
        "multiprobe"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    #[inline]
    fn locate(&self, key: &[u8]) -> Option<usize> {
        self.locate_hash(self.hash.hash64(key))
    }

    /// The owner, then the following points clockwise from the winning point. The paper defines no
    /// replicas; with one point per node this walk yields distinct nodes, in circle order.
    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        out.clear();
        let Some(start) = self.winning_point(self.hash.hash64(key)) else {
            return;
        };
        let n = self.positions.len();
        for j in 0..count.min(n) {
            out.push(self.owners[(start + j) % n] as usize);
        }
    }

    fn add(&mut self, node: Node) -> Result<(), Error> {
        require_unit_weight("multiprobe", &node)?;
        check_new(&self.nodes, &node)?;
        check_count(self.nodes.len() + 1)?;
        self.nodes.push(node);
        self.rebuild();
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let i = position(&self.nodes, name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        let node = self.nodes.swap_remove(i);
        self.rebuild();
        Ok(node)
    }

    /// The points: 12 bytes a node.
    fn memory_bytes(&self) -> usize {
        self.positions.capacity() * std::mem::size_of::<u64>()
            + self.owners.capacity() * std::mem::size_of::<u32>()
    }

    fn clone_box(&self) -> Box<dyn Placement> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::test_nodes;
    use crate::analysis::{spread, KeySet};
    use proptest::prelude::*;

    #[test]
    fn settings_and_errors() {
        for bad in [0, MAX_PROBES + 1] {
            assert!(matches!(
                MultiProbe::new(&test_nodes("n", 3), HashFunction::Xxh3, bad),
                Err(Error::InvalidSetting { .. })
            ));
        }
        let heavy = [Node::weighted("a", 2.0).unwrap()];
        assert!(matches!(
            MultiProbe::new(&heavy, HashFunction::Xxh3, 21),
            Err(Error::Unsupported { .. })
        ));
        let mut mp = MultiProbe::new(&[], HashFunction::Xxh3, 21).unwrap();
        assert_eq!(mp.locate(b"k"), None);
        mp.add(Node::new("a").unwrap()).unwrap();
        assert_eq!(mp.locate(b"k"), Some(0));
        assert!(matches!(
            mp.add(Node::new("a").unwrap()),
            Err(Error::DuplicateNode { .. })
        ));
        assert!(matches!(mp.remove("b"), Err(Error::UnknownNode { .. })));
    }

    #[test]
    fn one_probe_is_a_one_point_ring() {
        // With one probe the key goes to the successor of its (re-hashed) position.
        let mp = MultiProbe::new(&test_nodes("n", 10), HashFunction::Xxh3, 1).unwrap();
        for key in KeySet::synthetic(500).iter() {
            let p = MultiProbe::probe(HashFunction::Xxh3.hash64(key), 0);
            let naive = mp
                .positions
                .iter()
                .enumerate()
                .min_by_key(|(_, &x)| x.wrapping_sub(p))
                .map(|(i, _)| mp.owners[i] as usize);
            assert_eq!(mp.locate(key), naive);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8))]
        #[test]
        fn balance_improves_with_the_probe_count(prefix in "[a-z]{1,6}-") {
            let keys = KeySet::synthetic(40_000);
            let list = test_nodes(&prefix, 40);
            let peak = |probes| {
                spread(&MultiProbe::new(&list, HashFunction::Xxh3, probes).unwrap(), &keys).peak_to_mean
            };
            let (one, five, many) = (peak(1), peak(5), peak(41));
            prop_assert!(many < five && five < one, "1: {one}, 5: {five}, 41: {many}");
            prop_assert!(many < 1.2, "41 probes: {many}");
        }

        #[test]
        fn removing_any_node_moves_only_its_keys(count in 2usize..40, pick in any::<prop::sample::Index>(),
                                                 keys in proptest::collection::vec(any::<Vec<u8>>(), 1..200)) {
            let list = test_nodes("n", count);
            let before = MultiProbe::new(&list, HashFunction::Xxh3, 21).unwrap();
            let gone = list[pick.index(count)].name().to_string();
            let mut after = before.clone();
            after.remove(&gone).unwrap();
            for key in &keys {
                let (b, a) = (before.lookup(key).unwrap(), after.lookup(key).unwrap());
                if b.name() != gone {
                    prop_assert_eq!(a.name(), b.name());
                }
            }
        }
    }
}
