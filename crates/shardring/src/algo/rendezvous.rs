//! Rendezvous hashing, also called highest random weight (Thaler & Ravishankar 1996), with weights by the
//! logarithmic method (Schindelhauer & Schomaker, "Weighted distributed hash tables", 2005).
//!
//! Every node scores every key; the key belongs to the best score. A node's score for a key comes from
//! one 64-bit hash of the pair, read as `u` in the open interval (0, 1). The weighted score is
//! `-w / ln(u)`: the node with the highest score wins, and a node of weight `w` wins exactly a `w / W`
//! share of keys. We compute the equivalent `-ln(u) / w` and take the *smallest* (the reciprocal ranks
//! in the opposite order), which stays finite for every valid weight.
//!
//! Because each node's score depends only on the key and that node, removing any node moves exactly
//! its keys, and adding one moves only the keys it now wins. The price is a lookup that scores every
//! node: O(N).
//!
//! With equal weights the logarithm is skipped: the largest `u` has the highest score, so the raw hash
//! comparison gives the same answer. Exact ties in `u` fall to the larger raw hash, then to the smaller
//! name, so placement never depends on the order nodes were added.

use std::cmp::Ordering;

use crate::algo::{check_count, check_new, check_unique, fmix64, name_hash, position};
use crate::hash::{HashFunction, KeyHash};
use crate::{Error, Node, Placement};

/// The seed of node-name hashes for rendezvous.
const NODE_SEED: u64 = 0x7265_6e64_657a_766f; // "rendezvo"

/// Rendezvous hashing with logarithmic weights; see the [module docs](self).
///
/// ```
/// use shardring::algo::Rendezvous;
/// use shardring::{HashFunction, Node, Placement};
///
/// let nodes = [Node::new("a")?, Node::new("b")?, Node::weighted("c", 2.0)?];
/// let mut hrw = Rendezvous::new(&nodes, HashFunction::Xxh3)?;
/// let owner = hrw.lookup(b"user:7").unwrap().name().to_string();
/// if owner != "a" {
///     hrw.remove("a")?; // keys of other nodes never move
///     assert_eq!(hrw.lookup(b"user:7").unwrap().name(), owner);
/// }
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Rendezvous {
    /// The members, in the order given (removal swaps the last into the hole; order never affects
    /// placement).
    nodes: Vec<Node>,
    /// Each node's hash seed, derived from its name only, parallel to `nodes`.
    seeds: Vec<u64>,
    /// Each node's `1 / weight`, parallel to `nodes`: a multiplication in the hot loop, not a division.
    inv_weights: Vec<f64>,
    /// Whether every weight is the same, which allows the logarithm-free comparison.
    uniform: bool,
    /// The key hash.
    hash: HashFunction,
}

impl Rendezvous {
    /// Rendezvous hashing over `nodes`.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`].
    pub fn new(nodes: &[Node], hash: HashFunction) -> Result<Rendezvous, Error> {
        check_unique(nodes)?;
        check_count(nodes.len())?;
        let mut r = Rendezvous {
            nodes: Vec::with_capacity(nodes.len()),
            seeds: Vec::with_capacity(nodes.len()),
            inv_weights: Vec::with_capacity(nodes.len()),
            uniform: true,
            hash,
        };
        for node in nodes {
            r.push(node.clone());
        }
        Ok(r)
    }

    fn push(&mut self, node: Node) {
        self.seeds.push(fmix64(name_hash(node.name(), NODE_SEED)));
        self.inv_weights.push(1.0 / node.weight());
        self.nodes.push(node);
        self.refresh_uniform();
    }

    fn refresh_uniform(&mut self) {
        let first = self.nodes.first().map(Node::weight);
        self.uniform = self.nodes.iter().all(|n| Some(n.weight()) == first);
    }

    /// Node `i`'s raw 64-bit hash for a key hash.
    #[inline]
    fn raw(&self, key_hash: u64, i: usize) -> u64 {
        fmix64(key_hash ^ self.seeds[i])
    }

    /// `-ln(u) / w` for a raw hash: smaller wins. `u` is strictly inside (0, 1): the top 52 bits plus
    /// one half, over 2^52 (exact in an `f64`, whose spacing below 2^52 is at most 0.5), so the
    /// logarithm is finite and negative and `u` never rounds to 1.
    #[inline]
    fn cost(&self, raw: u64, i: usize) -> f64 {
        let u = ((raw >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64);
        -u.ln() * self.inv_weights[i]
    }

    /// Whether node `a` (raw hash `ra`) beats node `b` (raw hash `rb`) for this key.
    #[inline]
    fn beats(&self, a: usize, ra: u64, b: usize, rb: u64) -> bool {
        let by_score = if self.uniform {
            ra.cmp(&rb)
        } else {
            // Smaller cost wins: reverse, so Greater means "a wins".
            self.cost(rb, b)
                .total_cmp(&self.cost(ra, a))
                .then(ra.cmp(&rb))
        };
        match by_score {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => self.nodes[a].name() < self.nodes[b].name(),
        }
    }

    /// The owner of a key already hashed with [`KeyHash::hash64`].
    #[inline]
    pub fn locate_hash(&self, key_hash: u64) -> Option<usize> {
        if self.nodes.is_empty() {
            return None;
        }
        let mut best = 0;
        let mut best_raw = self.raw(key_hash, 0);
        if self.uniform {
            for i in 1..self.nodes.len() {
                let raw = self.raw(key_hash, i);
                if raw > best_raw || (raw == best_raw && self.beats(i, raw, best, best_raw)) {
                    best = i;
                    best_raw = raw;
                }
            }
        } else {
            let mut best_cost = self.cost(best_raw, 0);
            for i in 1..self.nodes.len() {
                let raw = self.raw(key_hash, i);
                let cost = self.cost(raw, i);
                if cost < best_cost || (cost == best_cost && self.beats(i, raw, best, best_raw)) {
                    best = i;
                    best_raw = raw;
                    best_cost = cost;
                }
            }
        }
        Some(best)
    }
}

impl Placement for Rendezvous {
    fn algorithm(&self) -> &'static str {
        "rendezvous"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    #[inline]
    fn locate(&self, key: &[u8]) -> Option<usize> {
        self.locate_hash(self.hash.hash64(key))
    }

    /// The `count` best-scoring nodes, best first: the natural replica order of rendezvous hashing.
    /// Removing a node only promotes the nodes ranked after it.
    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        out.clear();
        let key_hash = self.hash.hash64(key);
        let want = count.min(self.nodes.len());
        while out.len() < want {
            let mut best: Option<(usize, u64)> = None;
            for i in 0..self.nodes.len() {
                if out.contains(&i) {
                    continue;
                }
                let raw = self.raw(key_hash, i);
                match best {
                    Some((b, rb)) if !self.beats(i, raw, b, rb) => {}
                    _ => best = Some((i, raw)),
                }
            }
            match best {
                Some((i, _)) => out.push(i),
                None => break,
            }
        }
    }

    fn add(&mut self, node: Node) -> Result<(), Error> {
        check_new(&self.nodes, &node)?;
        check_count(self.nodes.len() + 1)?;
        self.push(node);
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let i = position(&self.nodes, name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        self.seeds.swap_remove(i);
        self.inv_weights.swap_remove(i);
        let node = self.nodes.swap_remove(i);
        self.refresh_uniform();
        Ok(node)
    }

    /// The per-node seeds and inverse weights.
    fn memory_bytes(&self) -> usize {
        self.seeds.capacity() * std::mem::size_of::<u64>()
            + self.inv_weights.capacity() * std::mem::size_of::<f64>()
    }

    fn clone_box(&self) -> Box<dyn Placement> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{spread, KeySet};
    use proptest::prelude::*;

    fn nodes(names: &[String]) -> Vec<Node> {
        names
            .iter()
            .map(|n| Node::new(n.clone()).unwrap())
            .collect()
    }

    #[test]
    fn weights_by_the_logarithmic_method() {
        let nodes = [
            Node::weighted("a", 1.0).unwrap(),
            Node::weighted("b", 3.0).unwrap(),
            Node::weighted("c", 0.5).unwrap(),
        ];
        let hrw = Rendezvous::new(&nodes, HashFunction::Xxh3).unwrap();
        let s = spread(&hrw, &KeySet::synthetic(90_000));
        let share = |n: &str| s.counts.iter().find(|c| c.0 == n).unwrap().1 as f64 / 90_000.0;
        assert!((share("b") - 3.0 / 4.5).abs() < 0.01, "{s:?}");
        assert!((share("c") - 0.5 / 4.5).abs() < 0.01, "{s:?}");
        assert!(s.peak_to_mean < 1.05, "{s:?}");
    }

    #[test]
    fn equal_weights_take_the_same_path_as_the_logarithm() {
        // All weights 2: the uniform fast path; compare against the weighted path forced on.
        let nodes: Vec<Node> = (0..20)
            .map(|i| Node::weighted(format!("n{i}"), 2.0).unwrap())
            .collect();
        let fast = Rendezvous::new(&nodes, HashFunction::Xxh3).unwrap();
        let mut slow = fast.clone();
        slow.uniform = false;
        for key in KeySet::synthetic(20_000).iter() {
            assert_eq!(fast.locate(key), slow.locate(key));
        }
    }

    #[test]
    fn u_stays_strictly_inside_the_unit_interval() {
        let hrw = Rendezvous::new(&[Node::new("a").unwrap()], HashFunction::Xxh3).unwrap();
        for raw in [0, 1, u64::MAX, u64::MAX - (1 << 12), 1 << 63] {
            let cost = hrw.cost(raw, 0);
            assert!(cost.is_finite() && cost > 0.0, "{raw:#x}: {cost}");
        }
    }

    #[test]
    fn extreme_weights_do_not_panic() {
        let nodes = [
            Node::weighted("tiny", f64::MIN_POSITIVE / 4.0).unwrap(),
            Node::weighted("huge", f64::MAX).unwrap(),
            Node::weighted("one", 1.0).unwrap(),
        ];
        let hrw = Rendezvous::new(&nodes, HashFunction::Xxh3).unwrap();
        let mut out = Vec::new();
        for key in KeySet::synthetic(1000).iter() {
            assert_eq!(hrw.lookup(key).unwrap().name(), "huge");
            hrw.replicas_into(key, 5, &mut out);
            assert_eq!(out.len(), 3);
        }
    }

    #[test]
    fn errors_leave_it_unchanged() {
        let mut hrw = Rendezvous::new(&[], HashFunction::Xxh3).unwrap();
        assert_eq!(hrw.locate(b"x"), None);
        hrw.add(Node::new("a").unwrap()).unwrap();
        assert!(matches!(
            hrw.add(Node::new("a").unwrap()),
            Err(Error::DuplicateNode { .. })
        ));
        assert!(matches!(hrw.remove("zz"), Err(Error::UnknownNode { .. })));
        assert_eq!(hrw.nodes().len(), 1);
        assert_eq!(hrw.locate(b"x"), Some(0));
    }

    fn names_strategy() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::hash_set("[a-z0-9:.]{1,12}", 2..30)
            .prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #[test]
        fn removing_any_node_moves_only_its_keys(names in names_strategy(), pick in any::<prop::sample::Index>(),
                                                 weighted in any::<bool>(),
                                                 keys in proptest::collection::vec(any::<Vec<u8>>(), 1..200)) {
            let mut list = nodes(&names);
            if weighted {
                list = list.iter().enumerate()
                    .map(|(i, n)| Node::weighted(n.name(), 0.5 + (i % 4) as f64).unwrap()).collect();
            }
            let before = Rendezvous::new(&list, HashFunction::Xxh3).unwrap();
            let gone = names[pick.index(names.len())].clone();
            let mut after = before.clone();
            after.remove(&gone).unwrap();
            for key in &keys {
                let (b, a) = (before.lookup(key).unwrap(), after.lookup(key).unwrap());
                if b.name() != gone {
                    prop_assert_eq!(a.name(), b.name());
                }
            }
        }

        #[test]
        fn placement_ignores_insertion_order(names in names_strategy(), keys in proptest::collection::vec(any::<Vec<u8>>(), 1..50)) {
            let list = nodes(&names);
            let mut reversed = list.clone();
            reversed.reverse();
            let a = Rendezvous::new(&list, HashFunction::Xxh3).unwrap();
            let b = Rendezvous::new(&reversed, HashFunction::Xxh3).unwrap();
            for key in &keys {
                prop_assert_eq!(a.lookup(key).unwrap().name(), b.lookup(key).unwrap().name());
            }
        }
    }
}
