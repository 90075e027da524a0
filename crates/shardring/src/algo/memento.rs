//! MementoHash (Coluzzi, Brocco, Antonucci, Leidi, "MementoHash: A Stateful, Minimal Memory, Best
//! Performing Consistent Hash Algorithm", IEEE/ACM ToN 2024).
//!
//! Jump consistent hash over a bucket array of size `n`, plus a *memento*: a record of the buckets
//! removed from anywhere but the end. Each record holds the working-set size just after the removal
//! (which is also the bucket that took the removed one's place) and the previously removed bucket. A
//! key whose jump bucket was removed re-hashes into the working set as it was just after that removal,
//! following replacements of buckets removed earlier, until it reaches a working bucket.
//!
//! Removing any node moves exactly its keys; adding restores the most recently removed bucket (or
//! appends one when nothing is removed) and moves exactly the keys that bucket owns. With no removals a
//! lookup *is* jump; each removal costs memory (12 bytes) and a little lookup time only while it lasts.
//! Unlike [`Anchor`](super::Anchor) there is no capacity to choose.
//!
//! Buckets follow the order nodes are given, and removals and additions must happen in the same order
//! for two processes to agree. There are no weights: [`Error::Unsupported`].

use crate::algo::{
    check_count, check_new, check_unique, jump_hash, mix2, position, replicas_by_rehash,
    require_unit_weight,
};
use crate::hash::{HashFunction, KeyHash};
use crate::{Error, Node, Placement};

/// Marks a bucket with no node in `bucket_node`.
const NO_NODE: u32 = u32::MAX;

/// One removed bucket's memento.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Removed {
    /// The removed bucket.
    bucket: u32,
    /// The working-set size just after the removal, which is also the replacing bucket.
    replacer: u32,
    /// The bucket removed before this one, restored after it.
    prev_removed: u32,
}

/// MementoHash over named nodes; see the [module docs](self).
///
/// ```
/// use shardring::algo::Memento;
/// use shardring::{HashFunction, Node, Placement};
///
/// let nodes = ["a", "b", "c", "d"].map(|n| Node::new(n).unwrap());
/// let mut memento = Memento::new(&nodes, HashFunction::Xxh3)?;
/// let owner = memento.lookup(b"user:7").unwrap().name().to_string();
/// let other = if owner == "b" { "c" } else { "b" };
/// memento.remove(other)?; // any node, and only its keys move
/// assert_eq!(memento.lookup(b"user:7").unwrap().name(), owner);
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Memento {
    /// The members, in no meaningful order (removal swaps the last into the hole).
    nodes: Vec<Node>,
    /// Jump's bucket count: working buckets plus removed ones below the last.
    size: u32,
    /// The mementos, sorted by bucket for binary search.
    removed: Vec<Removed>,
    /// The bucket the next addition restores.
    last_removed: u32,
    /// Bucket → index into `nodes`, or `NO_NODE`; `size` entries.
    bucket_node: Vec<u32>,
    /// Index into `nodes` → bucket.
    node_bucket: Vec<u32>,
    /// The key hash.
    hash: HashFunction,
}

impl Memento {
    /// MementoHash over `nodes`, bucket `i` being `nodes[i]`.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`]; [`Error::Unsupported`] for a weight other than 1.
    pub fn new(nodes: &[Node], hash: HashFunction) -> Result<Memento, Error> {
        check_unique(nodes)?;
        check_count(nodes.len())?;
        for node in nodes {
            require_unit_weight("memento", node)?;
        }
        let n = nodes.len() as u32;
        Ok(Memento {
            nodes: nodes.to_vec(),
            size: n,
            removed: Vec::new(),
            last_removed: n,
            bucket_node: (0..n).collect(),
            node_bucket: (0..n).collect(),
            hash,
        })
    }

    /// How many removed buckets are remembered (removals not at the end of the bucket array).
    pub fn removed_count(&self) -> usize {
        self.removed.len()
    }

    /// The replacer of `bucket` if it was removed.
    #[inline]
    fn replacer(&self, bucket: u32) -> Option<u32> {
        if self.removed.is_empty() {
            return None;
        }
        self.removed
            .binary_search_by_key(&bucket, |r| r.bucket)
            .ok()
            .map(|i| self.removed[i].replacer)
    }

    /// The working bucket of a key hash (the paper's lookup); `None` when nothing works.
    #[inline]
    fn bucket(&self, key_hash: u64) -> Option<u32> {
        if self.nodes.is_empty() {
            return None;
        }
        let mut b = jump_hash(key_hash, self.size)?;
        let mut replacer = self.replacer(b);
        while let Some(size) = replacer {
            if size == 0 {
                // Only reachable with no working bucket, which returned above; never divide by 0.
                return None;
            }
            // Re-hash into the working set as it was just after `b` was removed.
            b = (mix2(key_hash, u64::from(b)) % u64::from(size)) as u32;
            // Follow buckets removed before `b` was (when the working set was at least as large).
            let mut r = self.replacer(b);
            while let Some(next) = r.filter(|&x| x >= size) {
                b = next;
                r = self.replacer(b);
            }
            replacer = r;
        }
        Some(b)
    }

    /// The owner of a key already hashed with [`KeyHash::hash64`].
    #[inline]
    pub fn locate_hash(&self, key_hash: u64) -> Option<usize> {
        self.bucket(key_hash)
            .map(|b| self.bucket_node[b as usize] as usize)
    }
}

impl Placement for Memento {
    fn algorithm(&self) -> &'static str {
        "memento"
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

    /// Restores the most recently removed bucket for `node`, or appends a bucket: only keys that move
    /// to `node` move.
    fn add(&mut self, node: Node) -> Result<(), Error> {
        require_unit_weight("memento", &node)?;
        check_new(&self.nodes, &node)?;
        check_count(self.nodes.len() + 1)?;
        let bucket = self.last_removed;
        match self.removed.binary_search_by_key(&bucket, |r| r.bucket) {
            Ok(i) => {
                self.last_removed = self.removed.remove(i).prev_removed;
            }
            Err(_) => {
                self.last_removed = bucket + 1;
                if self.size <= bucket {
                    self.size = bucket + 1;
                }
            }
        }
        if self.bucket_node.len() <= bucket as usize {
            self.bucket_node.resize(bucket as usize + 1, NO_NODE);
        }
        self.bucket_node[bucket as usize] = self.nodes.len() as u32;
        self.node_bucket.push(bucket);
        self.nodes.push(node);
        Ok(())
    }

    /// Removes `name`'s bucket: shrinks jump when it is the last bucket and nothing else is removed,
    /// otherwise remembers it. Exactly its keys move either way.
    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let i = position(&self.nodes, name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        let bucket = self.node_bucket[i];
        if self.removed.is_empty() && bucket + 1 == self.size {
            self.size -= 1;
        } else {
            // The working-set size after this removal.
            let replacer = (self.nodes.len() - 1) as u32;
            let entry = Removed {
                bucket,
                replacer,
                prev_removed: self.last_removed,
            };
            let at = self
                .removed
                .binary_search_by_key(&bucket, |r| r.bucket)
                .unwrap_or_else(|at| at);
            self.removed.insert(at, entry);
        }
        self.last_removed = bucket;
        self.bucket_node[bucket as usize] = NO_NODE;
        self.bucket_node.truncate(self.size as usize);
        let node = self.nodes.swap_remove(i);
        self.node_bucket.swap_remove(i);
        if i < self.nodes.len() {
            self.bucket_node[self.node_bucket[i] as usize] = i as u32;
        }
        Ok(node)
    }

    /// The mementos (12 bytes per removed bucket) and the bucket map (4 bytes per bucket and node).
    fn memory_bytes(&self) -> usize {
        self.removed.capacity() * std::mem::size_of::<Removed>()
            + (self.bucket_node.capacity() + self.node_bucket.capacity())
                * std::mem::size_of::<u32>()
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
    fn without_removals_it_is_jump() {
        let list = test_nodes("n", 37);
        let m = Memento::new(&list, HashFunction::Xxh3).unwrap();
        let j = crate::algo::Jump::new(&list, HashFunction::Xxh3).unwrap();
        for key in KeySet::synthetic(5000).iter() {
            assert_eq!(m.locate(key), j.locate(key));
        }
        assert_eq!(m.removed_count(), 0);
    }

    #[test]
    fn errors_and_emptying() {
        let mut m = Memento::new(&test_nodes("n", 3), HashFunction::Xxh3).unwrap();
        assert!(matches!(m.remove("x"), Err(Error::UnknownNode { .. })));
        assert!(matches!(
            m.add(Node::new("n1").unwrap()),
            Err(Error::DuplicateNode { .. })
        ));
        assert!(matches!(
            m.add(Node::weighted("w", 0.5).unwrap()),
            Err(Error::Unsupported { .. })
        ));
        m.remove("n1").unwrap();
        m.remove("n0").unwrap();
        m.remove("n2").unwrap();
        assert_eq!(m.locate(b"k"), None);
        let mut out = vec![1, 2];
        m.replicas_into(b"k", 2, &mut out);
        assert!(out.is_empty());
        m.add(Node::new("z").unwrap()).unwrap();
        assert_eq!(m.lookup(b"k").unwrap().name(), "z");
        m.add(Node::new("y").unwrap()).unwrap();
        let s = spread(&m, &KeySet::synthetic(10_000));
        assert!(s.min > 4000, "{s:?}");
    }

    #[test]
    fn balanced_after_many_removals() {
        let mut m = Memento::new(&test_nodes("n", 60), HashFunction::Xxh3).unwrap();
        for i in (0..60).step_by(3) {
            m.remove(&format!("n{i}")).unwrap();
        }
        assert_eq!(m.removed_count(), 20);
        let s = spread(&m, &KeySet::synthetic(80_000));
        assert!(s.peak_to_mean < 1.12, "{s:?}");
    }

    #[test]
    fn add_after_remove_takes_back_exactly_those_keys() {
        let keys = KeySet::synthetic(20_000);
        let before = Memento::new(&test_nodes("n", 10), HashFunction::Xxh3).unwrap();
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
        fn removing_any_node_moves_only_its_keys(count in 1usize..50, history in changes(),
                                                 pick in any::<prop::sample::Index>(),
                                                 keys in proptest::collection::vec(any::<u64>(), 1..300)) {
            let mut m = Memento::new(&test_nodes("n", count), HashFunction::Xxh3).unwrap();
            for (step, change) in history.iter().enumerate() {
                match change {
                    Change::Remove(i) if m.nodes().len() > 1 => {
                        let name = m.nodes()[i.index(m.nodes().len())].name().to_string();
                        m.remove(&name).unwrap();
                    }
                    _ => m.add(Node::new(format!("added{step}")).unwrap()).unwrap(),
                }
            }
            let gone = m.nodes()[pick.index(m.nodes().len())].name().to_string();
            let mut after = m.clone();
            after.remove(&gone).unwrap();
            for &key in &keys {
                let b = &m.nodes()[m.locate_hash(key).unwrap()];
                match after.locate_hash(key) {
                    Some(i) => if b.name() != gone {
                        prop_assert_eq!(after.nodes()[i].name(), b.name());
                    },
                    None => prop_assert!(after.nodes().is_empty()),
                }
            }
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
