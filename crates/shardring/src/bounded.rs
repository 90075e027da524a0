//! Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018).
//!
//! # Why
//! Virtual nodes even out how much of the *key space* each node owns, but not how much *traffic* it gets:
//! a popular key sends all its requests to one node. Bounded loads cap every node's in-flight requests at
//! a small factor `c` over the average. A request goes to the first node clockwise from its key (the
//! ring's answer) unless that node is full, then to the next distinct node clockwise, and so on. Keys
//! keep their node as long as it has room, so caches stay warm; only the overflow of a hot node spills,
//! and it spills to the same few neighbours every time.
//!
//! # The cap
//! With `m` requests in flight (counting the one being placed) on `n` nodes of equal weight, a node
//! accepts a request only if its load stays at most `⌈c · m / n⌉`. A node of weight `w` among nodes of
//! total weight `W` has the cap `⌈c · m · w / W⌉`. Since the caps add up to at least `c · m ≥ m`, some node
//! always has room.
//!
//! # Guarantee, precisely
//! When a request is admitted, its node's load including it is at most the cap computed from the number
//! in flight at that moment. When requests finish, the average falls, and a node may then hold more than
//! the *new*, lower cap; it receives nothing more until it is back under its cap. Under concurrent use the
//! check and the increment are one atomic compare-and-swap on the node's counter, so two threads can never
//! both take a node's last slot. Only when releases race with admissions so that every node is at its cap
//! (impossible single-threaded) does a request go to the least-loaded node instead of failing.
//!
//! # Membership changes
//! A [`BoundedLoads`] tracks one state of one ring (node indices are only meaningful there). When the
//! membership of a [`SharedRing`](crate::shared::SharedRing) changes, build a new one over the new
//! snapshot; requests still in flight on the old one release into the old one, so the new caps start from
//! the requests admitted under them. Their sum is then briefly below the true load in flight.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::{Error, Node, Ring};

/// Bounded-load lookups over one [`Ring`]: tracks each node's requests in flight and places keys so that
/// no node exceeds its cap. See the [module docs](self).
///
/// ```
/// use shardring::{bounded::BoundedLoads, Ring};
///
/// let ring = Ring::builder().nodes(["a", "b", "c", "d"]).build()?;
/// let bounded = BoundedLoads::new(ring, 1.25)?;
/// // Every request for one hot key: the owner fills up to its cap, then the overflow walks clockwise.
/// let guards: Vec<_> = (0..100).map(|_| bounded.take("hot").unwrap()).collect();
/// for node in 0..4 {
///     assert!(bounded.load(node) <= bounded.cap(node, 100));
/// }
/// drop(guards); // releasing is dropping the guard
/// assert_eq!(bounded.in_flight(), 0);
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug)]
pub struct BoundedLoads {
    /// The placement being bounded; shared so a [`SharedRing`](crate::shared::SharedRing) snapshot can be
    /// bounded without a copy.
    ring: Arc<Ring>,
    /// The balance factor `c ≥ 1`.
    factor: f64,
    /// Each node's fraction of the total weight (all equal when weights are ignored), in node order.
    shares: Box<[f64]>,
    /// Each node's requests in flight, in node order.
    loads: Box<[AtomicU64]>,
    /// All requests in flight.
    in_flight: AtomicU64,
}

impl BoundedLoads {
    /// Bounds `ring` with balance factor `factor`; node weights scale the caps.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] when `factor` is not a finite number of at least 1.
    pub fn new(ring: impl Into<Arc<Ring>>, factor: f64) -> Result<BoundedLoads, Error> {
        BoundedLoads::build(ring.into(), factor, true)
    }

    /// Like [`new`](BoundedLoads::new), but every node gets the same cap whatever its weight: for rings
    /// whose weights describe placement rather than capacity (e.g. weights set by the
    /// [rebalancer](crate::rebalance)).
    ///
    /// # Errors
    /// As [`new`](BoundedLoads::new).
    pub fn unweighted(ring: impl Into<Arc<Ring>>, factor: f64) -> Result<BoundedLoads, Error> {
        BoundedLoads::build(ring.into(), factor, false)
    }

    fn build(ring: Arc<Ring>, factor: f64, weighted: bool) -> Result<BoundedLoads, Error> {
        if !(factor.is_finite() && factor >= 1.0) {
            return Err(Error::InvalidSetting {
                setting: "balance factor",
                reason: format!("{factor} is not a finite number of at least 1"),
            });
        }
        let nodes = ring.nodes();
        let total: f64 = nodes.iter().map(Node::weight).sum();
        let shares = nodes
            .iter()
            .map(|n| {
                if weighted {
                    n.weight() / total
                } else {
                    1.0 / nodes.len() as f64
                }
            })
            .collect();
        let loads = nodes.iter().map(|_| AtomicU64::new(0)).collect();
        Ok(BoundedLoads {
            ring,
            factor,
            shares,
            loads,
            in_flight: AtomicU64::new(0),
        })
    }

    /// The ring being bounded.
    pub fn ring(&self) -> &Arc<Ring> {
        &self.ring
    }

    /// The balance factor `c`.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// Node `index`'s cap when `in_flight` requests are in flight (counting the one being placed):
    /// `⌈c · in_flight · share⌉`, where share is 1/n, or weight / total weight.
    pub fn cap(&self, index: usize, in_flight: u64) -> u64 {
        let share = self.shares.get(index).copied().unwrap_or(0.0);
        (self.factor * in_flight as f64 * share).ceil() as u64
    }

    /// Node `index`'s requests in flight (0 for an index past the last node).
    pub fn load(&self, index: usize) -> u64 {
        // Relaxed: a statistic read; see `take` for why the counters need no ordering.
        self.loads
            .get(index)
            .map_or(0, |l| l.load(Ordering::Relaxed))
    }

    /// All requests in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Places a request for `key` and counts it against its node until the returned guard is dropped.
    /// `None` only when the ring is empty.
    ///
    /// Allocates only when the walk passes more than 8 full nodes (see [`Ring::replicas`]).
    pub fn take(&self, key: impl AsRef<[u8]>) -> Option<LoadGuard<'_>> {
        if self.ring.is_empty() {
            return None;
        }
        // Orderings: every counter here is only ever changed by atomic read-modify-writes, and no other
        // memory is published through them, so Relaxed suffices. The cap check and the increment of a
        // node are one compare-and-swap (`fetch_update`), which is what makes the cap hold under races.
        // `m` is this thread's own increment of `in_flight`, so it counts this request.
        let m = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let mut walk = self.ring.replicas(key.as_ref());
        while let Some(index) = walk.next_index() {
            let cap = self.cap(index, m);
            let admitted =
                self.loads[index].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                    (l < cap).then_some(l + 1)
                });
            if admitted.is_ok() {
                return Some(LoadGuard { owner: self, index });
            }
        }
        // Every node was at its cap: only possible when concurrent releases lowered `m` below what the
        // loads were admitted under. Take the least-loaded node rather than fail.
        let index = (0..self.loads.len())
            .min_by_key(|&i| self.load(i))
            .unwrap_or(0);
        self.loads[index].fetch_add(1, Ordering::Relaxed);
        Some(LoadGuard { owner: self, index })
    }
}

/// One request in flight on a node; dropping it releases the load.
#[derive(Debug)]
#[must_use = "the load is released as soon as the guard is dropped"]
pub struct LoadGuard<'a> {
    /// Whose counters to release on drop.
    owner: &'a BoundedLoads,
    /// The node the request went to.
    index: usize,
}

impl<'a> LoadGuard<'a> {
    /// The node the request went to.
    pub fn node(&self) -> &'a Node {
        &self.owner.ring.nodes()[self.index]
    }

    /// The node's index in the ring's [`nodes`](Ring::nodes).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for LoadGuard<'_> {
    fn drop(&mut self) {
        // Relaxed, as in `take`: both are plain counters changed only by atomic read-modify-writes.
        self.owner.loads[self.index].fetch_sub(1, Ordering::Relaxed);
        self.owner.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ring(weights: &[f64]) -> Ring {
        let mut b = Ring::builder().vnodes(50);
        for (i, &w) in weights.iter().enumerate() {
            b = b.node(format!("node-{i}"), w);
        }
        b.build().unwrap()
    }

    #[test]
    fn rejects_factors_below_one() {
        for c in [0.5, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                BoundedLoads::new(ring(&[1.0]), c),
                Err(Error::InvalidSetting { .. })
            ));
        }
        let empty = BoundedLoads::new(Ring::new(), 1.0).unwrap();
        assert!(empty.take("k").is_none());
    }

    #[test]
    fn light_load_goes_to_the_ring_owner() {
        let r = ring(&[1.0, 1.0, 1.0]);
        let owner = r.lookup_index("k").unwrap();
        let b = BoundedLoads::new(r, 2.0).unwrap();
        // One request in flight: cap is ⌈2·1/3⌉ = 1, the owner has room.
        assert_eq!(b.take("k").unwrap().index(), owner);
    }

    #[test]
    fn hot_key_spills_clockwise_in_replica_order() {
        let r = ring(&[1.0; 4]);
        let order: Vec<usize> = {
            let mut w = r.replicas("hot");
            std::iter::from_fn(|| w.next_index()).collect()
        };
        let b = BoundedLoads::new(r, 1.0).unwrap();
        let guards: Vec<_> = (0..8).map(|_| b.take("hot").unwrap()).collect();
        // c = 1 and 8 requests on 4 nodes: exactly 2 each at the end, filled in replica order.
        for &i in &order {
            assert_eq!(b.load(i), 2);
        }
        assert_eq!(guards[0].index(), order[0]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Take(u16),
        Release(usize),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                3 => any::<u16>().prop_map(Op::Take),
                2 => any::<usize>().prop_map(Op::Release),
            ],
            1..300,
        )
    }

    proptest! {
        /// For any sequence of takes and releases: every admitted request leaves its node within the cap
        /// computed at admission, the node is the first in clockwise order with room (the algorithm), and
        /// the bookkeeping matches a naive model.
        #[test]
        fn cap_holds_for_any_take_release_sequence(
            weights in prop::collection::vec(prop_oneof![Just(1.0), Just(2.0), Just(0.5)], 1..8),
            factor in 1.0f64..3.0,
            ops in ops(),
        ) {
            let b = BoundedLoads::new(ring(&weights), factor).unwrap();
            let mut held = Vec::new();
            let mut model = vec![0u64; weights.len()];
            for op in ops {
                match op {
                    Op::Take(k) => {
                        let key = k.to_le_bytes();
                        let before = model.clone();
                        let m = held.len() as u64 + 1;
                        let g = b.take(key).unwrap();
                        let i = g.index();
                        model[i] += 1;
                        prop_assert!(model[i] <= b.cap(i, m), "load {} > cap {}", model[i], b.cap(i, m));
                        // The naive oracle: the first node clockwise whose load is below its cap.
                        let mut walk = b.ring().replicas(key);
                        let expected = std::iter::from_fn(|| walk.next_index())
                            .find(|&j| before[j] < b.cap(j, m));
                        prop_assert_eq!(Some(i), expected);
                        held.push(g);
                    }
                    Op::Release(pick) if !held.is_empty() => {
                        let g = held.swap_remove(pick % held.len());
                        model[g.index()] -= 1;
                    }
                    Op::Release(_) => {}
                }
                prop_assert_eq!(b.in_flight(), held.len() as u64);
                for (i, &l) in model.iter().enumerate() {
                    prop_assert_eq!(b.load(i), l);
                }
            }
        }
    }

    #[test]
    fn concurrent_takers_respect_the_cap_when_nobody_releases() {
        let b = BoundedLoads::new(ring(&[1.0; 5]), 1.25).unwrap();
        let per_thread = 2000u64;
        let guards: Vec<Vec<LoadGuard<'_>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let b = &b;
                    s.spawn(move || {
                        (0..per_thread)
                            .map(|i| b.take(format!("k{}", (i * 4 + t) % 50)).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total = 4 * per_thread;
        assert_eq!(b.in_flight(), total);
        for i in 0..5 {
            // Caps only grow while nobody releases, so the final cap bounds every admission.
            assert!(b.load(i) <= b.cap(i, total));
        }
        drop(guards);
        assert_eq!(b.in_flight(), 0);
    }
}
