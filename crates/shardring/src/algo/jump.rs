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
//! Bucket numbers follow the order nodes are given, so that order is part of the configuration: two
//! processes must list the nodes in the same order to agree.

use crate::algo::{check_count, check_unique, position, replicas_by_rehash, require_unit_weight};
use crate::hash::{HashFunction, KeyHash};
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
}

impl Jump {
    /// Jump over `nodes`, bucket `i` being `nodes[i]`.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`]; [`Error::Unsupported`] for a weight other than 1.
    pub fn new(nodes: &[Node], hash: HashFunction) -> Result<Jump, Error> {
        check_unique(nodes)?;
        check_count(nodes.len())?;
        for node in nodes {
            require_unit_weight("jump", node)?;
        }
        Ok(Jump {
            nodes: nodes.to_vec(),
            hash,
        })
    }

    /// The owner of a key already hashed with [`KeyHash::hash64`].
    #[inline]
    pub fn locate_hash(&self, hash: u64) -> Option<usize> {
        jump_hash(hash, self.nodes.len() as u32).map(|b| b as usize)
    }
}

impl Placement for Jump {
    fn algorithm(&self) -> &'static str {
        "jump"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    #[inline]
    fn locate(&self, key: &[u8]) -> Option<usize> {
        self.locate_hash(self.hash.hash64(key))
    }

    /// The owner, then the owners of rehashes of the key (see the crate's replica rules for
    /// numbered-bucket algorithms): distinct, deterministic, first equal to `locate`.
    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        let hash = self.hash.hash64(key);
        replicas_by_rehash(hash, self.nodes.len(), count, out, |h| self.locate_hash(h));
    }

    /// Appends `node` as the next bucket: only keys that move to it move.
    fn add(&mut self, node: Node) -> Result<(), Error> {
        require_unit_weight("jump", &node)?;
        if position(&self.nodes, node.name()).is_some() {
            return Err(Error::DuplicateNode {
                node: node.name().to_string(),
            });
        }
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
    use proptest::prelude::*;

    fn nodes(n: usize) -> Vec<Node> {
        (0..n)
            .map(|i| Node::new(format!("n{i}")).unwrap())
            .collect()
    }

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
        let before = Jump::new(&nodes(10), HashFunction::Xxh3).unwrap();
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
        fn adding_a_node_moves_keys_only_to_it(count in 1usize..40, keys in proptest::collection::vec(any::<Vec<u8>>(), 1..100)) {
            let before = Jump::new(&nodes(count), HashFunction::Xxh3).unwrap();
            let mut after = before.clone();
            after.add(Node::new("new").unwrap()).unwrap();
            for key in &keys {
                let (b, a) = (before.lookup(key).unwrap(), after.lookup(key).unwrap());
                prop_assert!(a.name() == b.name() || a.name() == "new");
            }
        }
    }
}
