//! A table that answers most lookups from one 8-byte entry: one cache line, one cache miss.
//!
//! With the top-bits index alone, a lookup loads the index entry of its hash's bucket, then the
//! bucket's points: two dependent loads, both cache misses once the ring is larger than the caches.
//! Worse, the search over the points ends on a branch the CPU cannot predict for keys it has not seen,
//! and a mispredicted branch that waits on a miss also throws away the next lookups the CPU had
//! started: over the bench crate's cold pool a single lookup cost 13.3 ns at 1000 nodes, against
//! 4.3 ns for the same two loads without the search (`bench/src/bin/lookup-floors.rs`, best of 5).
//! Counting the bucket's points without a branch took it to 6.7-7.6 ns, but cached lookups from
//! 3.2 to 4.9 ns, so the library keeps the branch and offers this table instead.
//!
//! This table has one entry per bucket of the top `bits` bits of a position (about one bucket per
//! point), and each entry carries what its bucket's lookups need: the low bits of the bucket's first
//! two points (the bits below the bucket's own), and the nodes of those points and of the point after
//! them. A lookup counts how many of the two are below its hash, without a branch, and that count
//! picks the node: the answer for every bucket of up to two points (and for the hashes before the
//! second point of a fuller one), 93% of lookups at 1000 nodes × 160 points. The others find a
//! sentinel instead of a node and search the points through the (then coarser) top-bits index.
//!
//! Entry layout, from the lowest bit: `low1` and `low2` (`low_bits` each), then the nodes `n0`, `n1`,
//! `n2` (`node_bits` each). A bucket of `k` points stores:
//! - `k = 0`: both lows all ones, `n0` the node of the next point on the circle;
//! - `k = 1`: `low1` its point, `low2` all ones, `n0` its node, `n1` the next point's;
//! - `k = 2`: both points and their nodes, `n2` the next point's;
//! - `k > 2`: the first two points and their nodes, `n2` the sentinel (all ones).
//!
//! Fields a bucket does not use are all ones.
//!
//! A hash with low bits `low` counts `c = [low > low1] + [low > low2]` and answers node `n_c`: the
//! first point at or after the hash is the `c`-th of the bucket (its lows are sorted, and a point at
//! the hash is not below it), or the next one when the bucket has `c` points. An all-ones low is never
//! below a hash, so it counts as no point.
//!
//! Memory: 8 bytes a bucket. The table is only kept where its fields fit 64 bits (`2 × low_bits + 3 ×
//! node_bits` ≤ 64: at 160 points a node, up to 4095 nodes, so not at 10,000) and where, with the index
//! four times coarser beside it, both stay within 7.75 bytes a point (see [`AnswerTable::bits_for`]).

use super::index::TopBitsIndex;
use super::Point;

/// The most bytes a point the table and its coarser index may add to the 8 of the point itself.
const BYTES_PER_POINT: f64 = 7.75;

/// How many bits coarser the top-bits index is beside a table: the table answers most lookups, and
/// the index, searched by the rest, then costs a quarter.
pub(crate) const INDEX_COARSER: u32 = 2;

/// The lookup table; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnswerTable {
    /// How far a position is shifted right to give its bucket: `32 - bits`; also `low_bits`.
    shift: u32,
    /// The width of a node field; the all-ones value is the sentinel, never a node.
    node_bits: u32,
    /// `2^shift - 1`: the low bits of a position, and the empty low.
    low_mask: u64,
    /// `2^node_bits - 1`: a node field, and the sentinel.
    node_mask: u64,
    /// One entry per bucket.
    entries: Vec<u64>,
}

impl AnswerTable {
    /// The bucket bits of the table for `len` points owned by `nodes` nodes, or `None` when no table
    /// should be kept: its fields would not fit an entry, or the ring is too small for the coarser
    /// index beside it to have a bucket.
    ///
    /// One bucket per point or a little fewer, as the index alone would have (the largest power of
    /// two not above the count); half as many when that would cost more than [`BYTES_PER_POINT`]
    /// with the index, which happens just above a power of two.
    pub(crate) fn bits_for(len: usize, nodes: usize) -> Option<u32> {
        if len < 16 || nodes == 0 {
            return None;
        }
        let mut bits = super::index::bits_for(len);
        let bytes = |bits: u32| (1u64 << bits) as f64 * (8.0 + 4.0 / f64::from(1 << INDEX_COARSER));
        if bytes(bits) > BYTES_PER_POINT * len as f64 {
            bits -= 1;
        }
        let node_bits = node_bits(nodes);
        let fits = nodes < u32::MAX as usize && 2 * (32 - bits) + 3 * node_bits <= 64;
        (fits && bits > INDEX_COARSER).then_some(bits)
    }

    /// Whether this table has the layout a ring of `nodes` nodes wants with `bits` table bits (so it
    /// can be updated in place rather than rebuilt).
    pub(crate) fn has_layout(&self, bits: Option<u32>, nodes: usize) -> bool {
        bits == Some(32 - self.shift) && node_bits(nodes) == self.node_bits
    }

    /// The table of `points` (sorted by position) owned by `nodes` nodes, with `2^bits` buckets.
    pub(crate) fn build(points: &[Point], bits: u32, nodes: usize) -> AnswerTable {
        let index = TopBitsIndex::build(points, bits);
        AnswerTable::from_index(points, &index, nodes)
    }

    /// The table of `points` owned by `nodes` nodes, with a bucket for each of `index`'s (built over
    /// these points): a ring's build already has the index its counting sort made, so the table
    /// needs no pass of its own over the points to find where buckets start.
    pub(crate) fn from_index(points: &[Point], index: &TopBitsIndex, nodes: usize) -> AnswerTable {
        let bits = index.bits();
        let mut table = AnswerTable::empty(bits, nodes);
        let starts = index.starts();
        table.entries = starts
            .windows(2)
            .map(|w| table.entry(points, w[0] as usize, (w[1] - w[0]) as usize))
            .collect();
        table
    }

    /// A table of no entries yet, with the layout of `2^bits` buckets over `nodes` nodes.
    fn empty(bits: u32, nodes: usize) -> AnswerTable {
        let node_bits = node_bits(nodes);
        let shift = 32 - bits;
        debug_assert!(
            2 * shift + 3 * node_bits <= 64,
            "the fields must fit an entry"
        );
        AnswerTable {
            shift,
            node_bits,
            low_mask: (1u64 << shift) - 1,
            node_mask: (1u64 << node_bits) - 1,
            entries: Vec::new(),
        }
    }

    /// The entry of a bucket of `count` points from `points[start]` on (only whether it holds 0, 1, 2
    /// or more matters); see the module docs for the layout.
    ///
    /// Written without a branch on `count`: a build makes one entry per bucket, and buckets hold 0, 1,
    /// 2 or more points at random, so branches on the count were mispredicted about once a bucket (with
    /// them, a build with the table took about twice as long as one without, at 1000 nodes × 160
    /// points). `n_c`, for `c <= count`, is the node of the `c`-th point from `start` on, wrapping past
    /// the circle's end: a point of the bucket, or for `c == count` the next one on the circle.
    #[inline]
    fn entry(&self, points: &[Point], start: usize, count: usize) -> u64 {
        let three = match points.get(start..start + 3) {
            Some(w) => [w[0], w[1], w[2]],
            // The last buckets of the circle: the points after them are its first.
            None => std::array::from_fn(|c| points[(start + c) % points.len()]),
        };
        let low = |c: usize| {
            let own = u64::from(three[c].position) & self.low_mask;
            if count > c {
                own
            } else {
                self.low_mask
            }
        };
        let node = |c: usize, shown: bool| {
            let own = u64::from(three[c].node);
            if shown {
                own
            } else {
                self.node_mask
            }
        };
        low(0)
            | low(1) << self.shift
            | node(0, true) << (2 * self.shift)
            | node(1, count >= 1) << (2 * self.shift + self.node_bits)
            | node(2, count == 2) << (2 * self.shift + 2 * self.node_bits)
    }

    /// Updates the table after points at `positions` (sorted) were inserted into `points`, which
    /// `index` (up to date) indexes. An entry depends on its bucket's points and the next point on
    /// the circle, so each inserted point's bucket is redone, and so are the buckets before it back to
    /// the first that holds a point (wrapping past the start of the circle).
    pub(crate) fn inserted(&mut self, points: &[Point], index: &TopBitsIndex, positions: &[u32]) {
        let buckets = self.entries.len() as u32;
        for &position in positions {
            let mut bucket = position >> self.shift;
            for _ in 0..buckets {
                let start = index.search(points, bucket << self.shift);
                let count = points[start..]
                    .iter()
                    .take(3)
                    .take_while(|p| p.position >> self.shift == bucket)
                    .count();
                self.entries[bucket as usize] = self.entry(points, start, count);
                let holds_points = count > 0;
                if holds_points && bucket != position >> self.shift {
                    break;
                }
                bucket = bucket.checked_sub(1).unwrap_or(buckets - 1);
            }
        }
    }

    /// The node of the first point at or after `hash`, wrapping; `None` when the entry does not say
    /// (the points must be searched).
    #[inline(always)]
    pub(crate) fn node(&self, hash: u32) -> Option<u32> {
        let entry = self.entries[(hash >> self.shift) as usize];
        let low = u64::from(hash) & self.low_mask;
        let below = u32::from(low > entry & self.low_mask)
            + u32::from(low > (entry >> self.shift) & self.low_mask);
        let node = (entry >> (2 * self.shift + below * self.node_bits)) & self.node_mask;
        (node != self.node_mask).then_some(node as u32)
    }

    /// Asks the cache for `hash`'s entry.
    #[inline(always)]
    pub(crate) fn prefetch(&self, hash: u32) {
        super::prefetch::prefetch_item(&self.entries, (hash >> self.shift) as usize);
    }

    /// Heap bytes used.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<u64>()
    }
}

/// The width of a node field for `nodes` nodes: room for every index below `nodes` and for the
/// all-ones sentinel above them.
fn node_bits(nodes: usize) -> u32 {
    u32::BITS - (nodes.min(u32::MAX as usize) as u32).leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The oracle: the node of the first point at or after `hash` by a linear scan, wrapping.
    fn naive(points: &[Point], hash: u32) -> u32 {
        let i = points.partition_point(|p| p.position < hash);
        points.get(i).unwrap_or(&points[0]).node
    }

    fn points(positions: &[u32], nodes: u32) -> Vec<Point> {
        let mut positions = positions.to_vec();
        positions.sort_unstable();
        positions
            .iter()
            .enumerate()
            .map(|(i, &position)| Point {
                position,
                node: (i as u32).wrapping_mul(7) % nodes,
            })
            .collect()
    }

    /// Every answer the table gives is the oracle's, over random hashes and every point's
    /// neighbourhood, and the table answers most lookups of an even ring.
    fn check(points: &[Point], nodes: usize, bits: u32) -> f64 {
        let table = AnswerTable::build(points, bits, nodes);
        let mut state = 5u32;
        let mut probes: Vec<u32> = (0..4000)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                state
            })
            .collect();
        for p in points {
            let bucket = p.position >> table.shift << table.shift;
            probes.extend([
                p.position,
                p.position.wrapping_add(1),
                p.position.wrapping_sub(1),
            ]);
            probes.extend([
                bucket,
                bucket.wrapping_sub(1),
                bucket | table.low_mask as u32,
            ]);
        }
        probes.extend([0, 1, u32::MAX]);
        let mut answered = 0;
        for &hash in &probes {
            if let Some(node) = table.node(hash) {
                assert_eq!(node, naive(points, hash), "hash {hash:#x}, bits {bits}");
                answered += 1;
            }
        }
        answered as f64 / probes.len() as f64
    }

    #[test]
    fn answers_equal_a_linear_scan() {
        let mut state = 1u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        };
        for (len, nodes) in [
            (16usize, 3usize),
            (100, 1),
            (1000, 10),
            (5000, 255),
            (4096, 60),
            (200_000, 1000),
        ] {
            let mut positions: Vec<u32> = (0..len).map(|_| next()).collect();
            // Both ends of the circle, all-ones low bits, equal positions.
            positions.extend([0, 0, u32::MAX, u32::MAX - 1, 0x00ff_ffff, 0x00ff_ffff]);
            let points = points(&positions, nodes as u32);
            let bits = AnswerTable::bits_for(points.len(), nodes).unwrap();
            let answered = check(&points, nodes, bits);
            assert!(answered > 0.7, "{answered} answered, len {len}");
        }
    }

    #[test]
    fn crowded_buckets_are_answered_or_sent_to_the_search() {
        // Dozens of points in a few buckets (and runs of equal positions), the rest empty.
        let mut positions = Vec::new();
        for bucket in [0u32, 1, 7, 255] {
            for i in 0..40u32 {
                positions.push(bucket << 24 | (i * 3 % 17) << 10);
            }
        }
        let points = points(&positions, 9);
        check(&points, 9, 8);
        check(&points, 9, 10);
    }

    #[test]
    fn tables_are_kept_up_to_4095_nodes_of_160_points() {
        assert!(AnswerTable::bits_for(160 * 1000, 1000).is_some());
        assert!(AnswerTable::bits_for(160 * 4095, 4095).is_some());
        assert!(AnswerTable::bits_for(160 * 4096, 4096).is_none());
        assert!(AnswerTable::bits_for(160 * 10_000, 10_000).is_none());
        assert!(AnswerTable::bits_for(15, 3).is_none());
    }

    #[test]
    fn one_point_owns_the_circle() {
        let points = [Point {
            position: 77,
            node: 2,
        }];
        let table = AnswerTable::build(&points, 4, 3);
        for hash in [0, 76, 77, 78, u32::MAX] {
            assert_eq!(table.node(hash), Some(2));
        }
    }

    #[test]
    fn inserting_updates_the_table_like_a_rebuild() {
        let mut state = 3u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        };
        for first in [false, true] {
            let positions: Vec<u32> = (0..3000).map(|_| next() | 1).collect();
            let mut points = points(&positions, 50);
            let bits = 11;
            let mut table = AnswerTable::build(&points, bits, 60);
            // New points in crowded, empty and wrapping places, including before every other point.
            let mut new: Vec<u32> = (0..40).map(|_| next()).collect();
            new.extend([u32::MAX, points[5].position, points[5].position]);
            if first {
                new.push(0);
            }
            new.sort_unstable();
            for &position in &new {
                let at = points.partition_point(|p| p.position <= position);
                points.insert(at, Point { position, node: 55 });
            }
            let index = TopBitsIndex::build(&points, bits - INDEX_COARSER);
            table.inserted(&points, &index, &new);
            assert_eq!(table, AnswerTable::build(&points, bits, 60));
        }
    }
}
