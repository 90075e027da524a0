//! Walking the ring clockwise for distinct nodes.

use super::Ring;
use crate::Node;

/// How many yielded nodes are remembered inline before a bitset is allocated.
const INLINE: usize = 8;

/// Distinct nodes clockwise from a key; see [`Ring::replicas`].
///
/// The first few nodes are remembered in an inline array, so asking for up to 8 replicas does not
/// allocate; beyond that a bitset over the ring's nodes is allocated once.
#[derive(Debug, Clone)]
pub struct Replicas<'a> {
    /// The ring being walked.
    ring: &'a Ring,
    /// The next point to look at.
    next: usize,
    /// Points left to look at before the walk has gone once round.
    remaining: usize,
    /// The first `INLINE` node indices yielded.
    inline: [u32; INLINE],
    /// How many nodes were yielded.
    yielded: usize,
    /// Every yielded node, once more than `INLINE` were.
    seen: Vec<u64>,
}

impl<'a> Replicas<'a> {
    pub(super) fn new(ring: &'a Ring, start: Option<usize>) -> Replicas<'a> {
        Replicas {
            ring,
            next: start.unwrap_or(0),
            remaining: if start.is_some() {
                ring.points.len()
            } else {
                0
            },
            inline: [0; INLINE],
            yielded: 0,
            seen: Vec::new(),
        }
    }

    fn was_yielded(&self, node: u32) -> bool {
        if self.yielded <= INLINE {
            self.inline[..self.yielded].contains(&node)
        } else {
            self.seen[node as usize / 64] & (1 << (node % 64)) != 0
        }
    }

    fn remember(&mut self, node: u32) {
        if self.yielded < INLINE {
            self.inline[self.yielded] = node;
        } else {
            if self.seen.is_empty() {
                self.seen = vec![0; self.ring.nodes.len().div_ceil(64)];
                for &n in &self.inline {
                    self.seen[n as usize / 64] |= 1 << (n % 64);
                }
            }
            self.seen[node as usize / 64] |= 1 << (node % 64);
        }
        self.yielded += 1;
    }

    /// The next distinct node's index into [`Ring::nodes`].
    pub fn next_index(&mut self) -> Option<usize> {
        let points = &self.ring.points;
        while self.remaining > 0 && self.yielded < self.ring.nodes.len() {
            let node = points[self.next].node;
            self.next = if self.next + 1 == points.len() {
                0
            } else {
                self.next + 1
            };
            self.remaining -= 1;
            if !self.was_yielded(node) {
                self.remember(node);
                return Some(node as usize);
            }
        }
        None
    }
}

impl<'a> Iterator for Replicas<'a> {
    type Item = &'a Node;

    fn next(&mut self) -> Option<&'a Node> {
        let ring = self.ring;
        self.next_index().map(|i| &ring.nodes[i])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.ring.nodes.len() - self.yielded;
        (left.min(1).min(self.remaining), Some(left))
    }
}

impl std::iter::FusedIterator for Replicas<'_> {}
