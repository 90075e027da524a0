//! Jump consistent hash (Lamping & Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm", 2014).
//!
//! The function maps a 64-bit key to one of `n` numbered buckets with no memory at all, a perfectly
//! even spread, and the jump property: growing from `n` to `n + 1` buckets moves only the keys that go
//! to bucket `n`, 1/(n+1) of them. Its limit is that buckets are numbered: only the *last* bucket can
//! be removed for free.
//!
//! # Named nodes and removing from the middle
//! [`Jump`] keeps its nodes in a list; node `i` is bucket `i`. Adding appends a bucket. Removing node
//! `i` moves the *last* node into bucket `i` and shrinks the bucket count (the "move the last bucket
//! into the hole" choice), so the placement stays a plain jump over `0..n-1`. The cost, honestly:
//! - the removed node's keys (1/n) all move to the node that was last;
//! - the last node's own keys (1/n) are spread over the remaining buckets by jump's shrink, and about
//!   1/(n-1) of those land in bucket `i`, i.e. stay with that node.
//!
//! In all about 2/n of the keys move instead of the ideal 1/n (removing the last node costs exactly
//! 1/n). Use [`Memento`](super::Memento), which is jump plus a replacement set, when any node must be
//! removable at the cost of its keys only.
//!
//! # JumpBackHash
//! [`jump_back_hash`] (Ertl 2024) gives the same guarantees in expected constant time with integer
//! arithmetic only. It is faster than [`jump_hash`] at every bucket count, and many times faster from
//! 100 buckets on (BENCHMARKS.md, "jump against JumpBackHash"), so it is offered as its own algorithm,
//! `jumpback` ([`Jump::jump_back`]); `jump` stays the paper's function, whose bucket sequence other
//! jump implementations share.
//!
//! Bucket numbers follow the order nodes are given, so that order is part of the configuration: two
//! processes must list the nodes in the same order to agree.

use crate::algo::{
    check_count, check_new, check_unique, position, replicas_by_rehash, require_unit_weight,
};
use crate::hash::{HashFunction, KeyHash};
use crate::splitmix::SplitMix64;
use crate::{Error, Node, Placement};

/// The jump consistent hash of `key` over `buckets` buckets: a bucket in `0..buckets`, or `None` when
/// there are no buckets.
///
/// This is the paper's function exactly (its 64-bit linear congruential generator and its
/// floating-point jump), so it agrees with every faithful port; `testdata/jump/` holds vectors from
/// the paper's C++ code.
///
/// ```
/// use shardring::algo::jump_hash;
///
/// assert_eq!(jump_hash(0, 1), Some(0));
/// assert_eq!(jump_hash(42, 0), None);
/// let b = jump_hash(0xdead_beef, 10).unwrap();
/// // Growing to 11 buckets either keeps the key or moves it to the new bucket.
/// assert!(matches!(jump_hash(0xdead_beef, 11), Some(x) if x == b || x == 10));
/// ```
#[inline]
pub fn jump_hash(mut key: u64, buckets: u32) -> Option<u32> {
    if buckets == 0 {
        return None;
    }
    let n = i64::from(buckets);
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < n {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // `as` saturates on overflow; the quotient is at most 2^31 and `b + 1` at most 2^32.
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    // 0 <= b < buckets here.
    Some(b as u32)
}

/// JumpBackHash (Ertl, "JumpBackHash: Say Goodbye to the Modulo Operation to Distribute Keys
/// Uniformly to Buckets", 2024): the same guarantees as [`jump_hash`] (even spread; growing to
/// `n + 1` buckets moves keys only to bucket `n`) in expected constant time with integer arithmetic
/// only, walking *back* from the highest candidate bucket instead of jumping forward.
///
/// The random values come from SplitMix64 seeded with `key`. The bucket sequence therefore differs from
/// [`jump_hash`] and from other JumpBackHash implementations that use another generator: it is not a
/// drop-in replacement for either, which is why [`Jump`] keeps the paper's jump. `None` for 0 buckets.
///
/// ```
/// use shardring::algo::jump_back_hash;
///
/// assert_eq!(jump_back_hash(7, 0), None);
/// assert_eq!(jump_back_hash(7, 1), Some(0));
/// let b = jump_back_hash(0xdead_beef, 10).unwrap();
/// assert!(matches!(jump_back_hash(0xdead_beef, 11), Some(x) if x == b || x == 10));
/// ```
#[inline]
pub fn jump_back_hash(key: u64, buckets: u32) -> Option<u32> {
    match buckets {
        0 => return None,
        1 => return Some(0),
        _ => {}
    }
    let n = buckets;
    let mut rng = SplitMix64::new(key);
    let v = rng.next_u64();
    // The candidate bits: one per power of two below n, from a 32-bit fold of v.
    let mut u = ((v ^ (v >> 32)) as u32) & (u32::MAX >> (n - 1).leading_zeros());
    while u != 0 {
        // The highest remaining power of two q = 2^m: the key's last jump inside [q, 2q), if any.
        let q = 1u32 << (31 - u.leading_zeros());
        let low = if u.count_ones().is_multiple_of(2) {
            v as u32
        } else {
            (v >> 32) as u32
        };
        let mask = (q << 1).wrapping_sub(1);
        let mut b = q + (low & (q - 1));
        loop {
            if b < n {
                return Some(b);
            }
            // b is past the end: draw again within [0, 2q); below q means no jump in [q, n).
            let w = rng.next_u64();
            b = w as u32 & mask;
            if b < q {
                break;
            }
            if b < n {
                return Some(b);
            }
            b = (w >> 32) as u32 & mask;
            if b < q {
                break;
            }
        }
        u ^= q;
    }
    Some(0)
}

/// Jump consistent hash over named nodes; see the [module docs](self) for what removal costs.
///
/// ```
/// use shardring::algo::Jump;
/// use shardring::{HashFunction, Node, Placement};
///
/// let nodes = ["a", "b", "c"].map(|n| Node::new(n).unwrap());
/// let jump = Jump::new(&nodes, HashFunction::Xxh3)?;
/// assert!(jump.lookup(b"user:7").is_some());
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Jump {
    /// The members; node `i` is bucket `i`.
    nodes: Vec<Node>,
    /// The key hash; its 64-bit value seeds jump's generator.
    hash: HashFunction,
    /// Whether buckets come from [`jump_back_hash`] (the `jumpback` algorithm) instead of
    /// [`jump_hash`]. Same guarantees, different (faster) bucket sequence.
    back: bool,
}

impl Jump {
    /// Jump over `nodes`, bucket `i` being `nodes[i]`.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`]; [`Error::Unsupported`] for a weight other than 1.
    pub fn new(nodes: &[Node], hash: HashFunction) -> Result<Jump, Error> {
        Jump::make(nodes, hash, false)
    }

    /// Like [`new`](Jump::new), but placing keys with [`jump_back_hash`]: the `jumpback` algorithm.
    /// Every property of jump holds (including what removal costs); lookups take expected constant
    /// time instead of O(log n), but keys land on different buckets than under the paper's jump.
    ///
    /// # Errors
    /// As for [`new`](Jump::new).
    pub fn jump_back(nodes: &[Node], hash: HashFunction) -> Result<Jump, Error> {
        Jump::make(nodes, hash, true)
    }

    fn make(nodes: &[Node], hash: HashFunction, back: bool) -> Result<Jump, Error> {
        let jump = Jump {
            nodes: Vec::new(),
            hash,
            back,
        };
        check_unique(nodes)?;
        check_count(nodes.len())?;
        for node in nodes {
            require_unit_weight(jump.algorithm(), node)?;
        }
        Ok(Jump {
            nodes: nodes.to_vec(),
            ..jump
        })
    }

    /// The owner of a key already hashed with [`KeyHash::hash64`].
    #[inline]
    pub fn locate_hash(&self, hash: u64) -> Option<usize> {
        let n = self.nodes.len() as u32;
        if self.back {
            jump_back_hash(hash, n).map(|b| b as usize)
        } else {
            jump_hash(hash, n).map(|b| b as usize)
        }
    }
}

impl Placement for Jump {
    fn algorithm(&self) -> &'static str {
        if self.back {
            "jumpback"
        } else {
            "jump"
        }
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    #[inline]
    fn locate(&self, key: &[u8]) -> Option<usize> {
        self.locate_hash(self.hash.hash64(key))
    }

    /// The owner, then the owners of rehashes of the key (`mix2(hash, 1)`, `mix2(hash, 2)`, …),
    /// skipping repeats: distinct, deterministic, the first equal to `locate`. Each replica is placed
    /// by jump itself, so growing the node count moves a replica only to the new node.
    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        let hash = self.hash.hash64(key);
        replicas_by_rehash(hash, self.nodes.len(), count, out, |h| self.locate_hash(h));
    }

    /// Appends `node` as the next bucket: only keys that move to it move.
    fn add(&mut self, node: Node) -> Result<(), Error> {
        require_unit_weight(self.algorithm(), &node)?;
        check_new(&self.nodes, &node)?;
        check_count(self.nodes.len() + 1)?;
        self.nodes.push(node);
        Ok(())
    }

    /// Removes `name`, moving the last node into its bucket (about 2/n of the keys move unless it is
    /// the last node; see the [module docs](self)).
    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let i = position(&self.nodes, name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        Ok(self.nodes.swap_remove(i))
    }

    /// Jump keeps no lookup structure: zero.
    fn memory_bytes(&self) -> usize {
        0
    }

    fn clone_box(&self) -> Box<dyn Placement> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::test_nodes;
    use proptest::prelude::*;

    /// The vectors printed by `testdata/jump/jump.cc`, the paper's C++ function: `key buckets bucket`.
    #[test]
    fn golden_vectors_from_the_papers_code() {
        let text = include_str!("../../../../testdata/jump/golden.txt");
        let mut checked = 0;
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let f: Vec<u64> = line
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            let (key, buckets, want) = (f[0], f[1] as u32, f[2] as u32);
            assert_eq!(
                jump_hash(key, buckets),
                Some(want),
                "key {key} buckets {buckets}"
            );
            checked += 1;
        }
        assert!(checked >= 100, "only {checked} vectors");
        // Published in the tests of dgryski/go-jump, an independent port of the paper's function.
        for (key, buckets, want) in [
            (1, 1, 0),
            (42, 57, 43),
            (0xDEAD_10CC, 1, 0),
            (0xDEAD_10CC, 666, 361),
            (256, 1024, 520),
        ] {
            assert_eq!(
                jump_hash(key, buckets),
                Some(want),
                "key {key} buckets {buckets}"
            );
        }
    }

    #[test]
    fn jump_back_spreads_evenly_even_past_powers_of_two() {
        for n in [2u32, 3, 7, 16, 17, 100, 1000, (1 << 31) + 5] {
            let small = n.min(1000) as usize;
            let mut counts = vec![0u32; small];
            let draws = 200 * small as u64;
            for k in 0..draws {
                let b = jump_back_hash(crate::algo::fmix64(k), n).unwrap();
                assert!(b < n);
                if n as usize == small {
                    counts[b as usize] += 1;
                }
            }
            if n as usize == small {
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(*lo > 120 && *hi < 290, "n {n}: {lo}..{hi}");
            }
        }
        assert_eq!(
            jump_back_hash(u64::MAX, u32::MAX).map(|b| b < u32::MAX),
            Some(true)
        );
    }

    #[test]
    fn zero_buckets_and_one_bucket() {
        assert_eq!(jump_hash(123, 0), None);
        for key in [0, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            assert_eq!(jump_hash(key, 1), Some(0));
            assert!(jump_hash(key, u32::MAX).unwrap() < u32::MAX);
        }
    }

    #[test]
    fn empty_and_errors() {
        let mut jump = Jump::new(&[], HashFunction::Xxh3).unwrap();
        assert_eq!(jump.locate(b"k"), None);
        let mut out = vec![9];
        jump.replicas_into(b"k", 3, &mut out);
        assert!(out.is_empty());
        assert!(matches!(jump.remove("x"), Err(Error::UnknownNode { .. })));
        jump.add(Node::new("a").unwrap()).unwrap();
        assert!(matches!(
            jump.add(Node::new("a").unwrap()),
            Err(Error::DuplicateNode { .. })
        ));
        assert!(matches!(
            jump.add(Node::weighted("b", 2.0).unwrap()),
            Err(Error::Unsupported { .. })
        ));
        assert_eq!(jump.nodes().len(), 1);
        let dup = [Node::new("a").unwrap(), Node::new("a").unwrap()];
        assert!(matches!(
            Jump::new(&dup, HashFunction::Xxh3),
            Err(Error::DuplicateNode { .. })
        ));
    }

    #[test]
    fn removing_the_last_node_moves_only_its_keys_and_a_middle_one_about_two_over_n() {
        let keys = crate::analysis::KeySet::synthetic(20_000);
        let before = Jump::new(&test_nodes("n", 10), HashFunction::Xxh3).unwrap();
        let mut last = before.clone();
        last.remove("n9").unwrap();
        let m = crate::analysis::movement(&before, &last, &keys);
        assert_eq!(m.moved_from.keys().collect::<Vec<_>>(), vec!["n9"]);

        let mut middle = before.clone();
        middle.remove("n3").unwrap();
        let m = crate::analysis::movement(&before, &middle, &keys);
        // n3's keys, plus n9's keys less the ~1/9 that land back in bucket 3.
        let f = m.fraction();
        assert!(f > 0.17 && f < 0.22, "moved {f}");
        assert!(m.moved_from.keys().all(|k| k == "n3" || k == "n9"), "{m:?}");
    }

    proptest! {
        #[test]
        fn growing_moves_keys_only_to_the_new_bucket(key in any::<u64>(), n in 1u32..5000) {
            let before = jump_hash(key, n).unwrap();
            let after = jump_hash(key, n + 1).unwrap();
            prop_assert!(before < n);
            prop_assert!(after == before || after == n, "{before} -> {after}");
        }

        #[test]
        fn jump_back_growing_moves_keys_only_to_the_new_bucket(key in any::<u64>(), n in 1u32..5000) {
            let before = jump_back_hash(key, n).unwrap();
            let after = jump_back_hash(key, n + 1).unwrap();
            prop_assert!(before < n);
            prop_assert!(after == before || after == n, "{before} -> {after}");
        }

        #[test]
        fn adding_a_node_moves_keys_only_to_it(count in 1usize..40, keys in proptest::collection::vec(any::<Vec<u8>>(), 1..100)) {
            let before = Jump::new(&test_nodes("n", count), HashFunction::Xxh3).unwrap();
            let mut after = before.clone();
            after.add(Node::new("new").unwrap()).unwrap();
            for key in &keys {
                let (b, a) = (before.lookup(key).unwrap(), after.lookup(key).unwrap());
                prop_assert!(a.name() == b.name() || a.name() == "new");
            }
        }
    }
}
