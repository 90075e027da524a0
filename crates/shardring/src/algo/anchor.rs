//! AnchorHash (Mendelson, Vargaftik, Barabash, Lorenz, Keslassy, Orda, "AnchorHash: A Scalable
//! Consistent Hash", IEEE/ACM ToN 2020), the minimal-memory variant (the paper's Algorithm 3).
//!
//! A fixed *anchor* of `a` buckets, of which the `N` working ones hold nodes. A key hashes to a bucket
//! of the anchor; if that bucket was removed, the key re-hashes into the working set *as it was just
//! after the removal*, following the record of which bucket replaced which, until it lands on a working
//! bucket. Removing any bucket moves exactly its keys; adding restores the most recently removed bucket
//! and moves back exactly the keys that bucket would own. Lookups take `O(1 + ln(a / N))` expected
//! steps, four `u32` arrays of `a` entries hold the state.
//!
//! The capacity is fixed at construction: adding a node when all `a` buckets work fails with
//! [`Error::TooManyPoints`]. The default is twice the initial node count (at least 16).
//!
//! Buckets follow the order nodes are given, and removals and additions must happen in the same order
//! for two processes to agree, as the paper notes. A node added after a removal takes the removed
//! node's bucket (and exactly its keys). There are no weights: [`Error::Unsupported`].

use crate::algo::{
    check_new, check_unique, mix2, position, replicas_by_rehash, require_unit_weight,
};
use crate::hash::{HashFunction, KeyHash};
use crate::ring::DEFAULT_MAX_POINTS;
use crate::{Error, Node, Placement};

/// The smallest default capacity.
pub const MIN_DEFAULT_CAPACITY: u32 = 16;

/// Marks a bucket with no node in `bucket_node`.
const NO_NODE: u32 = u32::MAX;

/// AnchorHash over named nodes; see the [module docs](self).
///
/// ```
/// use shardring::algo::Anchor;
/// use shardring::{HashFunction, Node, Placement};
///
/// let nodes = ["a", "b", "c", "d"].map(|n| Node::new(n).unwrap());
/// let mut anchor = Anchor::new(&nodes, HashFunction::Xxh3, Some(8))?;
/// let owner = anchor.lookup(b"user:7").unwrap().name().to_string();
/// let other = if owner == "b" { "c" } else { "b" };
/// anchor.remove(other)?; // any node, and only its keys move
/// assert_eq!(anchor.lookup(b"user:7").unwrap().name(), owner);
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Anchor {
    /// The members, in no meaningful order (removal swaps the last into the hole).
    nodes: Vec<Node>,
    /// `A`: 0 for a working bucket, else the working-set size just after the bucket was removed.
    removed_at: Vec<u32>,
    /// `K`: the bucket that replaced each removed bucket (a working bucket's own number).
    replacement: Vec<u32>,
    /// `W`: the working buckets in their current order; the first `working` entries are live.
    order: Vec<u32>,
    /// `L`: each bucket's most recent position in `order`.
    location: Vec<u32>,
    /// `R`: removed buckets, the most recent last, for re-adding in reverse order.
    removed: Vec<u32>,
    /// `N`: how many buckets work (equals `nodes.len()`).
    working: u32,
    /// Bucket → index into `nodes`, or `NO_NODE`.
    bucket_node: Vec<u32>,
    /// Index into `nodes` → bucket.
    node_bucket: Vec<u32>,
    /// The key hash.
    hash: HashFunction,
}

impl Anchor {
    /// AnchorHash over `nodes` (bucket `i` is `nodes[i]`) with room for `capacity` nodes, or the
    /// default capacity when `None` (twice the node count, at least 16).
    ///
    /// # Errors
    /// [`Error::DuplicateNode`]; [`Error::Unsupported`] for weights; [`Error::InvalidSetting`] for a
    /// capacity of 0; [`Error::TooManyPoints`] when there are more nodes than the capacity, or the
    /// capacity exceeds 2^26 (the ring's point limit; the state is 24 bytes per bucket).
    pub fn new(nodes: &[Node], hash: HashFunction, capacity: Option<u32>) -> Result<Anchor, Error> {
        check_unique(nodes)?;
        for node in nodes {
            require_unit_weight("anchor", node)?;
        }
        let capacity = match capacity {
            Some(0) => {
                return Err(Error::InvalidSetting {
                    setting: "anchor capacity",
                    reason: "must be at least 1".into(),
                })
            }
            Some(c) => c,
            None => u32::try_from(nodes.len().saturating_mul(2))
                .unwrap_or(u32::MAX - 1)
                .max(MIN_DEFAULT_CAPACITY),
        };
        if u64::from(capacity) > DEFAULT_MAX_POINTS {
            // Six arrays of `capacity` entries: refuse sizes that would exhaust memory.
            return Err(Error::TooManyPoints {
                requested: u64::from(capacity),
                limit: DEFAULT_MAX_POINTS,
            });
        }
        if nodes.len() > capacity as usize {
            return Err(Error::TooManyPoints {
                requested: nodes.len() as u64,
                limit: u64::from(capacity),
            });
        }
        let a = capacity as usize;
        let w = nodes.len() as u32;
        let mut anchor = Anchor {
            nodes: nodes.to_vec(),
            removed_at: vec![0; a],
            replacement: (0..capacity).collect(),
            order: (0..capacity).collect(),
            location: (0..capacity).collect(),
            removed: Vec::with_capacity(a - nodes.len()),
            working: w,
            bucket_node: vec![NO_NODE; a],
            node_bucket: (0..w).collect(),
            hash,
        };
        // The paper's INITANCHOR: buckets w..a start removed, the highest first.
        for b in (w..capacity).rev() {
            anchor.removed.push(b);
            anchor.removed_at[b as usize] = b;
        }
        for i in 0..w {
            anchor.bucket_node[i as usize] = i;
        }
        Ok(anchor)
    }

    /// The most nodes this placement can hold.
    pub fn capacity(&self) -> u32 {
        self.removed_at.len() as u32
    }

    /// The working bucket of a key hash (the paper's GETBUCKET); `None` when nothing works.
    #[inline]
    fn bucket(&self, key_hash: u64) -> Option<u32> {
        if self.working == 0 {
            return None;
        }
        let a = self.removed_at.len() as u64;
        let mut b = (key_hash % a) as u32;
        loop {
            let size = self.removed_at[b as usize];
            if size == 0 {
                return Some(b);
            }
            // Re-hash into the working set as it was just after `b` was removed, then follow
            // replacements of buckets removed no later than `b` (their recorded size is >= b's).
            let mut h = (mix2(key_hash, u64::from(b)) % u64::from(size)) as u32;
            while self.removed_at[h as usize] >= size {
                h = self.replacement[h as usize];
            }
            b = h;
        }
    }

    /// The owner of a key already hashed with [`KeyHash::hash64`].
    #[inline]
    pub fn locate_hash(&self, key_hash: u64) -> Option<usize> {
        self.bucket(key_hash)
            .map(|b| self.bucket_node[b as usize] as usize)
    }
}

impl Placement for Anchor {
    fn algorithm(&self) -> &'static str {
        "anchor"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    #[inline]
    fn locate(&self, key: &[u8]) -> Option<usize> {
        self.locate_hash(self.hash.hash64(key))
    }

    /// The owner, then the owners of rehashes of the key: distinct, first equal to `locate`.
    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        let hash = self.hash.hash64(key);
        replicas_by_rehash(hash, self.nodes.len(), count, out, |h| self.locate_hash(h));
    }

    /// Restores the most recently removed bucket for `node` (the paper's ADDBUCKET): only keys that
    /// bucket owns move, to `node`.
    fn add(&mut self, node: Node) -> Result<(), Error> {
        require_unit_weight("anchor", &node)?;
        check_new(&self.nodes, &node)?;
        let Some(b) = self.removed.pop() else {
            return Err(Error::TooManyPoints {
                requested: u64::from(self.capacity()) + 1,
                limit: u64::from(self.capacity()),
            });
        };
        let n = self.working as usize;
        self.removed_at[b as usize] = 0;
        let displaced = self.order[n];
        self.location[displaced as usize] = n as u32;
        self.order[self.location[b as usize] as usize] = b;
        self.replacement[b as usize] = b;
        self.working += 1;

        self.bucket_node[b as usize] = self.nodes.len() as u32;
        self.node_bucket.push(b);
        self.nodes.push(node);
        Ok(())
    }

    /// Removes `name`'s bucket (the paper's REMOVEBUCKET): exactly its keys move.
    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let i = position(&self.nodes, name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        let b = self.node_bucket[i];
        self.removed.push(b);
        self.working -= 1;
        let n = self.working as usize;
        self.removed_at[b as usize] = n as u32;
        let last = self.order[n];
        let at = self.location[b as usize];
        self.order[at as usize] = last;
        self.location[last as usize] = at;
        self.replacement[b as usize] = last;

        self.bucket_node[b as usize] = NO_NODE;
        let node = self.nodes.swap_remove(i);
        self.node_bucket.swap_remove(i);
        if i < self.nodes.len() {
            self.bucket_node[self.node_bucket[i] as usize] = i as u32;
        }
        Ok(node)
    }

    /// The anchor's arrays and the bucket map: about 24 bytes per bucket of capacity.
    fn memory_bytes(&self) -> usize {
        let u = std::mem::size_of::<u32>();
        (self.removed_at.capacity()
            + self.replacement.capacity()
            + self.order.capacity()
            + self.location.capacity()
            + self.removed.capacity()
            + self.bucket_node.capacity()
            + self.node_bucket.capacity())
            * u
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
    fn capacity_and_errors() {
        let a = Anchor::new(&test_nodes("n", 3), HashFunction::Xxh3, None).unwrap();
        assert_eq!(a.capacity(), 16);
        let a = Anchor::new(&test_nodes("n", 100), HashFunction::Xxh3, None).unwrap();
        assert_eq!(a.capacity(), 200);
        assert!(matches!(
            Anchor::new(&test_nodes("n", 3), HashFunction::Xxh3, Some(0)),
            Err(Error::InvalidSetting { .. })
        ));
        assert!(matches!(
            Anchor::new(&test_nodes("n", 3), HashFunction::Xxh3, Some(2)),
            Err(Error::TooManyPoints { .. })
        ));
        for huge in [u32::MAX, 1 << 27] {
            assert!(matches!(
                Anchor::new(&test_nodes("n", 3), HashFunction::Xxh3, Some(huge)),
                Err(Error::TooManyPoints { .. })
            ));
        }
        let mut full = Anchor::new(&test_nodes("n", 2), HashFunction::Xxh3, Some(2)).unwrap();
        assert!(matches!(
            full.add(Node::new("x").unwrap()),
            Err(Error::TooManyPoints { .. })
        ));
        assert!(matches!(full.remove("x"), Err(Error::UnknownNode { .. })));
        assert!(matches!(
            full.add(Node::weighted("y", 3.0).unwrap()),
            Err(Error::Unsupported { .. })
        ));
        // Remove everything, then add back.
        full.remove("n0").unwrap();
        full.remove("n1").unwrap();
        assert_eq!(full.locate(b"k"), None);
        full.add(Node::new("z").unwrap()).unwrap();
        assert_eq!(full.lookup(b"k").unwrap().name(), "z");
    }

    #[test]
    fn balanced_after_many_removals() {
        let mut a = Anchor::new(&test_nodes("n", 60), HashFunction::Xxh3, Some(100)).unwrap();
        for i in (0..60).step_by(3) {
            a.remove(&format!("n{i}")).unwrap();
        }
        let s = spread(&a, &KeySet::synthetic(80_000));
        assert_eq!(s.counts.len(), 40);
        assert!(s.peak_to_mean < 1.12, "{s:?}");
    }

    #[test]
    fn add_after_remove_takes_back_exactly_those_keys() {
        let keys = KeySet::synthetic(20_000);
        let before = Anchor::new(&test_nodes("n", 10), HashFunction::Xxh3, None).unwrap();
        let mut after = before.clone();
        after.remove("n4").unwrap();
        after.add(Node::new("fresh").unwrap()).unwrap();
        let m = movement(&before, &after, &keys);
        assert_eq!(m.moved_from.keys().collect::<Vec<_>>(), vec!["n4"]);
        assert_eq!(m.moved_to.keys().collect::<Vec<_>>(), vec!["fresh"]);
    }

    /// A membership change: remove the node at an index, or add a fresh one.
    #[derive(Debug, Clone)]
    enum Change {
        Remove(prop::sample::Index),
        Add,
    }

    fn changes() -> impl Strategy<Value = Vec<Change>> {
        proptest::collection::vec(
            prop_oneof![
                any::<prop::sample::Index>().prop_map(Change::Remove),
                Just(Change::Add)
            ],
            0..30,
        )
    }

    proptest! {
        #[test]
        fn removing_any_node_moves_only_its_keys(count in 1usize..50, spare in 0u32..40, history in changes(),
                                                 pick in any::<prop::sample::Index>(),
                                                 keys in proptest::collection::vec(any::<u64>(), 1..300)) {
            let mut a = Anchor::new(&test_nodes("n", count), HashFunction::Xxh3, Some(count as u32 + spare)).unwrap();
            // Any history of changes first, so the anchor is in an arbitrary reachable state.
            for (step, change) in history.iter().enumerate() {
                match change {
                    Change::Remove(i) if a.nodes().len() > 1 => {
                        let name = a.nodes()[i.index(a.nodes().len())].name().to_string();
                        a.remove(&name).unwrap();
                    }
                    _ => { let _ = a.add(Node::new(format!("added{step}")).unwrap()); }
                }
            }
            let gone = a.nodes()[pick.index(a.nodes().len())].name().to_string();
            let mut after = a.clone();
            after.remove(&gone).unwrap();
            for &key in &keys {
                let b = &a.nodes()[a.locate_hash(key).unwrap()];
                match after.locate_hash(key) {
                    Some(i) => if b.name() != gone {
                        prop_assert_eq!(after.nodes()[i].name(), b.name());
                    },
                    None => prop_assert!(after.nodes().is_empty()),
                }
            }
            // And adding a node back only moves keys to it.
            let mut back = after.clone();
            back.add(Node::new("back").unwrap()).unwrap();
            for &key in &keys {
                if let Some(i) = after.locate_hash(key) {
                    let now = back.nodes()[back.locate_hash(key).unwrap()].name();
                    prop_assert!(now == after.nodes()[i].name() || now == "back");
                }
            }
        }
    }
}
