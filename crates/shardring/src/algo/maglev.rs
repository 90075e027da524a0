//! Maglev hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load Balancer",
//! NSDI 2016, section 3.4).
//!
//! Each node has a permutation of the table's slots, `(offset + j × skip) mod M` with `offset` and
//! `skip` from two hashes of its name and `M` prime (so every skip visits every slot). Nodes take turns
//! claiming their next free preferred slot until the table is full; a key is `table[hash mod M]`: one
//! load. With equal weights every node ends with `⌊M/N⌋` or `⌈M/N⌉` slots.
//!
//! # Table size
//! `M` is fixed when the placement is built (by default the next prime at or above
//! `max(100 × N, 65,537)`, capped at 2^26) and kept across membership changes, as in the paper: resizing would remap
//! almost every key. The table is refilled from scratch on every change. A node count above `M` is
//! refused with [`Error::TooManyPoints`], since some nodes would then own nothing.
//!
//! # Movement
//! Maglev trades exact consistency for balance: when a node leaves, its slots go to the others, *and*
//! because the turn order shifts, a few slots change hands between surviving nodes too. The paper
//! measures this as a small extra disruption; `shardring analyze` reports the moved fraction against
//! the ideal 1/N rather than hiding it. Adding a node likewise moves more than 1/(N+1). The extra
//! shrinks as the table grows relative to the node count; measured on 1,000,000 synthetic keys,
//! removing one node moved:
//!
//! | nodes | table | moved | ideal 1/N | ratio |
//! |---:|---:|---:|---:|---:|
//! | 100 | 10,007 (100 per node) | 2.66 % | 1 % | 2.7× |
//! | 100 | 65,537 (the default) | 1.53 % | 1 % | 1.5× |
//! | 100 | 100,003 (1,000 per node) | 1.44 % | 1 % | 1.4× |
//! | 1000 | 100,003 (the default) | 0.65 % | 0.1 % | 6.5× |
//! | 1000 | 1,000,003 (1,000 per node) | 0.29 % | 0.1 % | 2.9× |
//!
//! Pass a larger [`maglev_table_size`](super::AlgorithmOptions::maglev_table_size) when movement
//! matters more than 4 bytes a slot.
//!
//! # Weights
//! Weighted the way Envoy does it: the heaviest node claims one slot per round and a node of weight
//! `w` claims its `k`-th slot in round `⌈k × w_max / w⌉`, so a node of half the weight claims one every
//! other round and each node's share of slots follows its weight. Turns come from a heap, so even very
//! skewed weights cost O(M log N). With equal weights every node claims one slot per round, in turn:
//! exactly the paper's algorithm.
//!
//! Nodes take their turns in name order, so placement never depends on the order nodes were given.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::algo::{check_count, check_new, check_unique, name_hash, position};
use crate::hash::{HashFunction, KeyHash};
use crate::ring::DEFAULT_MAX_POINTS;
use crate::{Error, Node, Placement};

/// The smallest default table: the paper's small table size, a prime.
pub const MIN_DEFAULT_TABLE_SIZE: u64 = 65_537;

/// Table slots per node of the default size.
pub const DEFAULT_SLOTS_PER_NODE: u64 = 100;

/// The seed of the name hash that gives a node's offset.
const OFFSET_SEED: u64 = 0x6d61_676c_6576_6f66; // "maglevof"
/// The seed of the name hash that gives a node's skip.
const SKIP_SEED: u64 = 0x6d61_676c_6576_736b; // "maglevsk"

/// Maglev's lookup table; see the [module docs](self).
///
/// ```
/// use shardring::algo::Maglev;
/// use shardring::{HashFunction, Node, Placement};
///
/// let nodes = ["a", "b", "c"].map(|n| Node::new(n).unwrap());
/// let maglev = Maglev::new(&nodes, HashFunction::Xxh3, Some(1000))?;
/// assert_eq!(maglev.table_size(), 1009); // the next prime
/// assert!(maglev.lookup(b"user:7").is_some());
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Maglev {
    /// The members, in the order given (turns are taken in name order regardless).
    nodes: Vec<Node>,
    /// Slot → index into `nodes`. Empty when there are no nodes.
    table: Vec<u32>,
    /// The prime table size `M`, fixed at construction.
    size: u64,
    /// The key hash.
    hash: HashFunction,
}

/// Whether `n` is prime (trial division; `n` is at most about 2^26 here).
fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    if n.is_multiple_of(2) {
        return n == 2;
    }
    let mut d = 3;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

/// The smallest prime at or above `n`.
fn next_prime(n: u64) -> u64 {
    let mut p = n.max(2);
    while !is_prime(p) {
        p += 1;
    }
    p
}

impl Maglev {
    /// Maglev over `nodes` with a table of `table_size` slots rounded up to a prime, or the default
    /// size (see the [module docs](self)) when `None`.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`]; [`Error::InvalidSetting`] for a table size of 0;
    /// [`Error::TooManyPoints`] when a requested size exceeds 2^26 slots or the table would hold fewer
    /// slots than nodes.
    pub fn new(
        nodes: &[Node],
        hash: HashFunction,
        table_size: Option<u64>,
    ) -> Result<Maglev, Error> {
        check_unique(nodes)?;
        check_count(nodes.len())?;
        let wanted = match table_size {
            Some(0) => {
                return Err(Error::InvalidSetting {
                    setting: "maglev table size",
                    reason: "must be at least 1".into(),
                })
            }
            Some(s) => s,
            // Capped at the limit: past 671,088 nodes the default gives fewer than 100 slots each.
            None => (nodes.len() as u64)
                .saturating_mul(DEFAULT_SLOTS_PER_NODE)
                .clamp(MIN_DEFAULT_TABLE_SIZE, DEFAULT_MAX_POINTS),
        };
        if wanted > DEFAULT_MAX_POINTS {
            return Err(Error::TooManyPoints {
                requested: wanted,
                limit: DEFAULT_MAX_POINTS,
            });
        }
        let size = next_prime(wanted);
        Maglev::check_fits(nodes.len(), size)?;
        let mut maglev = Maglev {
            nodes: nodes.to_vec(),
            table: Vec::new(),
            size,
            hash,
        };
        maglev.populate();
        Ok(maglev)
    }

    fn check_fits(nodes: usize, size: u64) -> Result<(), Error> {
        if nodes as u64 > size {
            return Err(Error::TooManyPoints {
                requested: nodes as u64,
                limit: size,
            });
        }
        Ok(())
    }

    /// The prime table size `M`.
    pub fn table_size(&self) -> u64 {
        self.size
    }

    /// How many slots each node owns, in [`nodes`](Placement::nodes) order.
    pub fn slot_counts(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.nodes.len()];
        for &i in &self.table {
            counts[i as usize] += 1;
        }
        counts
    }

    /// Fills the table from scratch: the paper's population loop, with Envoy-style weighted turns.
    fn populate(&mut self) {
        self.table.clear();
        let n = self.nodes.len();
        if n == 0 {
            return;
        }
        let m = self.size;
        // Turn order: by name, so the table never depends on insertion order.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| self.nodes[a].name().cmp(self.nodes[b].name()));
        let offsets: Vec<u64> = order
            .iter()
            .map(|&i| name_hash(self.nodes[i].name(), OFFSET_SEED) % m)
            .collect();
        let skips: Vec<u64> = order
            .iter()
            .map(|&i| {
                if m == 1 {
                    1
                } else {
                    name_hash(self.nodes[i].name(), SKIP_SEED) % (m - 1) + 1
                }
            })
            .collect();
        // A node of weight w takes its k-th slot in round ceil(k × w_max / w): every round for the
        // heaviest, every other round at half its weight. Turns are scheduled with a heap so that
        // skewed weights cost O(M log N) rather than a pass over all N nodes per round.
        let max_weight = self.nodes.iter().map(Node::weight).fold(0.0, f64::max);
        let ratios: Vec<f64> = order
            .iter()
            .map(|&i| max_weight / self.nodes[i].weight())
            .collect();
        // `as` saturates: a weight so small its round overflows simply never gets a turn.
        let round_of = |t: usize, k: u64| (k as f64 * ratios[t]).ceil() as u64;
        let mut turns: BinaryHeap<Reverse<(u64, usize)>> =
            (0..n).map(|t| Reverse((round_of(t, 1), t))).collect();
        let mut placed = vec![0u64; n];
        // The next permutation index each node will try.
        let mut next = vec![0u64; n];
        const EMPTY: u32 = u32::MAX;
        let mut table = vec![EMPTY; m as usize];
        let mut filled = 0u64;
        while filled < m {
            // The heap always holds one turn per node; an empty heap cannot happen with n > 0.
            let Some(Reverse((_, t))) = turns.pop() else {
                break;
            };
            // Walk this node's permutation to its next free slot; a full cycle visits every slot,
            // and the table is not full, so this ends within M steps.
            let mut slot = (offsets[t] + (next[t] % m) * skips[t]) % m;
            while table[slot as usize] != EMPTY {
                next[t] += 1;
                slot = (offsets[t] + (next[t] % m) * skips[t]) % m;
            }
            table[slot as usize] = order[t] as u32;
            next[t] += 1;
            filled += 1;
            placed[t] += 1;
            turns.push(Reverse((round_of(t, placed[t] + 1), t)));
        }
        self.table = table;
    }

    /// The owner of a key already hashed with [`KeyHash::hash64`].
    #[inline]
    pub fn locate_hash(&self, hash: u64) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        Some(self.table[(hash % self.size) as usize] as usize)
    }
}

impl Placement for Maglev {
    fn algorithm(&self) -> &'static str {
        "maglev"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    #[inline]
    fn locate(&self, key: &[u8]) -> Option<usize> {
        self.locate_hash(self.hash.hash64(key))
    }

    /// The owner, then the owners of the following slots in table order, skipping repeats. The paper
    /// defines no replicas; this walk is deterministic and, since slots are spread by per-node
    /// permutations, the next distinct owner is close to uniformly chosen.
    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        out.clear();
        if self.table.is_empty() {
            return;
        }
        let want = count.min(self.nodes.len());
        let start = (self.hash.hash64(key) % self.size) as usize;
        let m = self.table.len();
        for j in 0..m {
            if out.len() >= want {
                return;
            }
            let i = self.table[(start + j) % m] as usize;
            if !out.contains(&i) {
                out.push(i);
            }
        }
        // Nodes that own no slot (weights far below the others') come last, in index order.
        for i in 0..self.nodes.len() {
            if out.len() >= want {
                return;
            }
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }

    /// Adds `node` and refills the table (its size stays).
    fn add(&mut self, node: Node) -> Result<(), Error> {
        check_new(&self.nodes, &node)?;
        check_count(self.nodes.len() + 1)?;
        Maglev::check_fits(self.nodes.len() + 1, self.size)?;
        self.nodes.push(node);
        self.populate();
        Ok(())
    }

    /// Removes `name` and refills the table; see the [module docs](self) for the extra movement.
    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let i = position(&self.nodes, name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        let node = self.nodes.swap_remove(i);
        self.populate();
        Ok(node)
    }

    /// The table: 4 bytes a slot.
    fn memory_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<u32>()
    }

    fn clone_box(&self) -> Box<dyn Placement> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::test_nodes;
    use crate::analysis::{movement, spread, KeySet};
    use proptest::prelude::*;

    #[test]
    fn primes() {
        assert_eq!(next_prime(0), 2);
        assert_eq!(next_prime(1000), 1009);
        assert_eq!(next_prime(65_537), 65_537);
        assert_eq!(next_prime(100_000), 100_003);
        assert!(!is_prime(1) && is_prime(2) && is_prime(3) && !is_prime(9));
    }

    #[test]
    fn default_size_is_a_prime_of_at_least_100_per_node() {
        let m = Maglev::new(&test_nodes("backend-", 3), HashFunction::Xxh3, None).unwrap();
        assert_eq!(m.table_size(), 65_537);
        let m = Maglev::new(&test_nodes("backend-", 1000), HashFunction::Xxh3, None).unwrap();
        assert_eq!(m.table_size(), 100_003);
        let m = Maglev::new(&[], HashFunction::Xxh3, None).unwrap();
        assert_eq!(m.locate(b"k"), None);
        assert_eq!(m.memory_bytes(), 0);
    }

    #[test]
    fn limits_and_errors() {
        assert!(matches!(
            Maglev::new(&test_nodes("backend-", 3), HashFunction::Xxh3, Some(0)),
            Err(Error::InvalidSetting { .. })
        ));
        assert!(matches!(
            Maglev::new(
                &test_nodes("backend-", 3),
                HashFunction::Xxh3,
                Some(1 << 40)
            ),
            Err(Error::TooManyPoints { .. })
        ));
        assert!(matches!(
            Maglev::new(&test_nodes("backend-", 5), HashFunction::Xxh3, Some(3)),
            Err(Error::TooManyPoints { .. })
        ));
        let mut m = Maglev::new(&test_nodes("backend-", 2), HashFunction::Xxh3, Some(3)).unwrap();
        m.add(Node::new("x").unwrap()).unwrap();
        assert!(matches!(
            m.add(Node::new("y").unwrap()),
            Err(Error::TooManyPoints { .. })
        ));
        assert_eq!(m.slot_counts(), vec![1, 1, 1]);
        assert!(matches!(m.remove("nope"), Err(Error::UnknownNode { .. })));
        assert!(matches!(
            m.add(Node::new("x").unwrap()),
            Err(Error::DuplicateNode { .. })
        ));
        // A one-slot table works.
        let one = Maglev::new(&test_nodes("backend-", 1), HashFunction::Xxh3, Some(1)).unwrap();
        assert_eq!(one.table_size(), 2);
        assert_eq!(one.locate(b"k"), Some(0));
    }

    #[test]
    fn weights_share_the_table() {
        let list = [
            Node::weighted("a", 1.0).unwrap(),
            Node::weighted("b", 2.0).unwrap(),
            Node::weighted("c", 0.25).unwrap(),
        ];
        let m = Maglev::new(&list, HashFunction::Xxh3, Some(10_007)).unwrap();
        let c = m.slot_counts();
        let total = 3.25;
        for (i, w) in [1.0, 2.0, 0.25].iter().enumerate() {
            let want = 10_007.0 * w / total;
            assert!((c[i] as f64 - want).abs() <= 2.0, "{c:?}");
        }
        assert!(spread(&m, &KeySet::synthetic(60_000)).peak_to_mean < 1.05);
    }

    #[test]
    fn skewed_weights_build_quickly_and_do_not_panic() {
        let mut list: Vec<Node> = (0..2000)
            .map(|i| Node::weighted(format!("light-{i}"), 1e-9).unwrap())
            .collect();
        list.push(Node::weighted("heavy", 1e9).unwrap());
        list.push(Node::weighted("subnormal", f64::MIN_POSITIVE / 8.0).unwrap());
        let start = std::time::Instant::now();
        let m = Maglev::new(&list, HashFunction::Xxh3, None).unwrap();
        assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
        let counts = m.slot_counts();
        assert_eq!(counts[2000], m.table_size());
        let mut out = Vec::new();
        m.replicas_into(b"k", 3, &mut out);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn removal_moves_its_keys_and_a_few_more() {
        let keys = KeySet::synthetic(50_000);
        let before = Maglev::new(&test_nodes("backend-", 20), HashFunction::Xxh3, None).unwrap();
        let mut after = before.clone();
        after.remove("backend-7").unwrap();
        let m = movement(&before, &after, &keys);
        let own = m.moved_from["backend-7"];
        // All of backend-7's keys moved, and the extra is small but (honestly) not zero.
        let expected_own = spread(&before, &keys)
            .counts
            .iter()
            .find(|c| c.0 == "backend-7")
            .unwrap()
            .1;
        assert_eq!(own, expected_own);
        let extra = (m.moved - own) as f64 / keys.len() as f64;
        assert!(extra < 0.05, "extra movement {extra}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn entries_per_node_differ_by_at_most_one(count in 1usize..60, size in 60u64..5000, reverse in any::<bool>()) {
            let mut list = test_nodes("backend-", count);
            if reverse {
                list.reverse();
            }
            let m = Maglev::new(&list, HashFunction::Xxh3, Some(size)).unwrap();
            let c = m.slot_counts();
            let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "{:?}", c);
            prop_assert_eq!(c.iter().sum::<u64>(), m.table_size());
        }

        #[test]
        fn placement_ignores_insertion_order(count in 1usize..30) {
            let list = test_nodes("backend-", count);
            let mut reversed = list.clone();
            reversed.reverse();
            let a = Maglev::new(&list, HashFunction::Xxh3, Some(1000)).unwrap();
            let b = Maglev::new(&reversed, HashFunction::Xxh3, Some(1000)).unwrap();
            for key in KeySet::synthetic(200).iter() {
                prop_assert_eq!(a.lookup(key).unwrap().name(), b.lookup(key).unwrap().name());
            }
        }
    }
}
