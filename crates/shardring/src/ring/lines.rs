//! A table of cache lines, one per bucket of positions, that answers a lookup from one line: one cache
//! miss where the top-bits index alone takes two that depend on each other.
//!
//! Through the index, a lookup loads the index entry of its hash's bucket, then the bucket's points.
//! Once the ring is larger than the caches both loads miss, and the second cannot start before the
//! first arrives. This table keeps, for every bucket of the top `bits` bits of a position (four index
//! buckets, 4 to 8 points on average), one 64-byte line holding what the bucket's lookups need:
//! - `marks`: for each of the bucket's points, in order, the 16 bits of its position just below the
//!   bucket's own bits (its *mark*), then empty slots;
//! - `nodes`: the node of each of those points, then the node of the point after them on the circle.
//!
//! A lookup takes its hash's mark and counts the marks below it, 16 compares at once without a
//! branch: the first point at or after the hash is the count-th of the bucket, or the next one on the
//! circle when the count is the bucket's size, and `nodes[count]` names its node in both cases. Marks
//! are in order, so the marks below the hash are a prefix of the line and the count is the prefix's
//! length.
//!
//! The line does not say, and the index must be searched instead (a branch the CPU predicts, as it is
//! almost never taken):
//! - when a mark equals the hash's: the marks are 16 bits of wider positions (below 16 bucket bits), so
//!   equal marks do not tell which position is smaller;
//! - for a bucket of more than [`CAPACITY`] points (0.06% of buckets at 6 points a bucket on average,
//!   as at 10,000 nodes × 160 points; 0.4% at 8, the most a line holds on average), whose line holds
//!   no points and names no node.
//!
//! Memory: 64 bytes a line, 8 to 16 bytes a point (the points and the index stay, for replicas, the
//! searches the table sends back, and everything else a ring does). Nodes are named in 16 bits, so the
//! table is only kept for up to [`MAX_NODES`] nodes, and for up to [`MAX_POINTS`] points.

use super::index::TopBitsIndex;
use super::Point;

/// Slots of a line: 16 marks (32 bytes) and 16 nodes (32 bytes).
const SLOTS: usize = 16;

/// The most points a line holds: the last mark is always empty, so that a count never passes the
/// last node slot, which names the next point's node when a bucket has this many.
pub(crate) const CAPACITY: usize = SLOTS - 1;

/// How many bits coarser the lines are than the top-bits index beside them: four index buckets a line,
/// so 4 to 8 points a line on average (the index has one bucket for every 1 to 2 points).
const COARSER: u32 = 2;

/// A free slot's mark: above or equal to every hash's, so never counted as below one.
const EMPTY: u16 = i16::MAX as u16;

/// A node slot that names no node: the line cannot answer.
const NO_NODE: u16 = u16::MAX;

/// The most nodes a table names: node indices below [`NO_NODE`].
pub(crate) const MAX_NODES: usize = NO_NODE as usize;

/// The most points a table is kept for. The index stops growing at 2^22 buckets
/// (`index::MAX_BITS`), so lines stop at 2^20, and past 8 points a line on average more and more
/// buckets overflow a line and are searched instead (5% of them at 10 points a line): a ring that
/// large gains nothing from the table, so it keeps none.
pub(crate) const MAX_POINTS: usize = 8 << 20;

/// One bucket's line: see the module docs. Marks are stored with their top bit flipped, so that the
/// signed 16-bit compares of SSE2 order them as unsigned numbers.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    marks: [u16; SLOTS],
    nodes: [u16; SLOTS],
}

impl Line {
    /// A line that answers nothing: every lookup that lands on it searches the index.
    const UNANSWERED: Line = Line {
        marks: [EMPTY; SLOTS],
        nodes: [NO_NODE; SLOTS],
    };
}

/// The lookup table; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineTable {
    /// Bucket bits: a position's top `bits` bits pick its line.
    bits: u32,
    /// `32 - bits`.
    shift: u32,
    /// How many bits finer the index is than the lines: line `b`'s points are those of index buckets
    /// `b << finer` to `(b + 1 << finer) - 1`.
    finer: u32,
    /// One line per bucket.
    lines: Vec<Line>,
}

impl LineTable {
    /// The table of `points` (sorted by position), whose node indices are below [`MAX_NODES`], with
    /// lines [`COARSER`] bits coarser than `index` (built over these points): the index's bucket starts
    /// say where each line's points are, so the build takes no pass of its own to find them.
    pub(crate) fn build(points: &[Point], index: &TopBitsIndex) -> LineTable {
        let mut table = LineTable {
            bits: 0,
            shift: 32,
            finer: 0,
            lines: Vec::new(),
        };
        table.rebuild(points, index);
        table
    }

    /// Makes this table [`build`](LineTable::build)'s for `points` and `index`, writing over its lines
    /// where the number of lines stays: a ring's node removal redoes every line (node indices
    /// change), and fresh memory for the lines costs the kernel a page fault per 4 KiB.
    pub(crate) fn rebuild(&mut self, points: &[Point], index: &TopBitsIndex) {
        debug_assert!(index.is_built() && !points.is_empty());
        self.bits = index.bits().saturating_sub(COARSER).max(1);
        self.shift = 32 - self.bits;
        self.finer = index.bits() - self.bits;
        let count = 1usize << self.bits;
        if self.lines.len() != count {
            self.lines = vec![Line::UNANSWERED; count];
        }
        for b in 0..count {
            self.lines[b] = self.line(points, index, b);
        }
    }

    /// Line `b` of `points`, as `index` (up to date) bounds it.
    fn line(&self, points: &[Point], index: &TopBitsIndex, b: usize) -> Line {
        let (from, to) = self.span(index, b);
        let count = to - from;
        if count > CAPACITY {
            return Line::UNANSWERED;
        }
        let mut line = Line::UNANSWERED;
        for (slot, p) in points[from..to].iter().enumerate() {
            line.marks[slot] = self.mark(p.position);
            line.nodes[slot] = p.node as u16;
        }
        let next = if to == points.len() { 0 } else { to };
        line.nodes[count] = points[next].node as u16;
        line
    }

    /// Where line `b`'s points lie in the points `index` indexes: `from..to`.
    fn span(&self, index: &TopBitsIndex, b: usize) -> (usize, usize) {
        let starts = index.starts();
        (
            starts[b << self.finer] as usize,
            starts[(b + 1) << self.finer] as usize,
        )
    }

    /// The mark of `position`: the 16 bits below its bucket bits, top bit flipped (see [`Line`]).
    #[inline(always)]
    fn mark(&self, position: u32) -> u16 {
        ((position << self.bits) >> 16) as u16 ^ 0x8000
    }

    /// Whether this table is laid out for `index`: it can be updated in place rather than rebuilt.
    pub(crate) fn fits(&self, index: &TopBitsIndex) -> bool {
        index.bits().saturating_sub(COARSER).max(1) == self.bits
    }

    /// Updates the table after points at `positions` (sorted) were inserted into `points`, which
    /// `index` (up to date, and one this table [`fits`](LineTable::fits)) indexes. A line depends on
    /// its bucket's points and the next point on the circle, so each inserted point's line is redone,
    /// and so are the lines before it back to the first that holds a point (wrapping past the start of
    /// the circle).
    pub(crate) fn inserted(&mut self, points: &[Point], index: &TopBitsIndex, positions: &[u32]) {
        let lines = self.lines.len();
        let mut done = None;
        for &position in positions {
            let own = (position >> self.shift) as usize;
            if done == Some(own) {
                continue;
            }
            done = Some(own);
            let mut b = own;
            for _ in 0..lines {
                self.lines[b] = self.line(points, index, b);
                let (from, to) = self.span(index, b);
                if to > from && b != own {
                    break;
                }
                b = b.checked_sub(1).unwrap_or(lines - 1);
            }
        }
    }

    /// The node of the first point at or after `hash`, wrapping; `None` when the line does not say
    /// (the index must be searched).
    #[inline(always)]
    pub(crate) fn node(&self, hash: u32) -> Option<u32> {
        let line = &self.lines[(hash >> self.shift) as usize];
        let (below, equal) = compare(&line.marks, self.mark(hash));
        // The marks below are a prefix; the last mark is never below, so the count is at most 15.
        let count = (!below).trailing_zeros() as usize & (SLOTS - 1);
        let node = line.nodes[count];
        if equal | (node == NO_NODE) {
            return None;
        }
        Some(u32::from(node))
    }

    /// Asks the cache for `hash`'s line.
    #[inline(always)]
    pub(crate) fn prefetch(&self, hash: u32) {
        super::prefetch::prefetch_item(&self.lines, (hash >> self.shift) as usize);
    }

    /// Heap bytes used.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.lines.capacity() * std::mem::size_of::<Line>()
    }
}

/// For the 16 marks of a line and a hash's `mark`: a mask of the marks below it (bit `i` for slot `i`)
/// and whether one equals it. Two compares of eight marks each (SSE2, part of every x86-64 CPU).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(
    unsafe_code,
    reason = "SSE2 compares: written as a loop, LLVM vectorised the compares but counted them with a \
              software popcount (x86-64's baseline has no popcnt) or assembled the mask lane by lane, \
              and single lookups were slower; with these, line-table lookups beat the index's \
              (BENCHMARKS.md, shardring-ring-lines against shardring-ring, cold pool)"
)]
fn compare(marks: &[u16; SLOTS], mark: u16) -> (u32, bool) {
    use core::arch::x86_64::{
        _mm_cmpeq_epi16, _mm_cmplt_epi16, _mm_loadu_si128, _mm_movemask_epi8, _mm_packs_epi16,
        _mm_set1_epi16,
    };
    // SAFETY:
    // 1. Every intrinsic here is SSE2, in the x86-64 target's baseline features: this code is never
    //    built for a CPU without it.
    // 2. The two loads read `marks[0..8]` and `marks[8..16]`: 16 bytes each, inside the array (32
    //    bytes), so in bounds; `_mm_loadu_si128` needs no alignment.
    unsafe {
        let low = _mm_loadu_si128(marks.as_ptr().cast());
        let high = _mm_loadu_si128(marks.as_ptr().add(8).cast());
        let hash = _mm_set1_epi16(mark as i16);
        // Each compare gives 0 or -1 a lane; packing saturates those to bytes, one a slot, in order.
        let below = _mm_packs_epi16(_mm_cmplt_epi16(low, hash), _mm_cmplt_epi16(high, hash));
        let equal = _mm_packs_epi16(_mm_cmpeq_epi16(low, hash), _mm_cmpeq_epi16(high, hash));
        (
            _mm_movemask_epi8(below) as u32,
            _mm_movemask_epi8(equal) != 0,
        )
    }
}

/// [`compare`] on other CPUs: the same answer, a slot at a time.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn compare(marks: &[u16; SLOTS], mark: u16) -> (u32, bool) {
    compare_portable(marks, mark)
}

/// [`compare`] without vector instructions: the fallback on other CPUs, and the oracle of its test.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
fn compare_portable(marks: &[u16; SLOTS], mark: u16) -> (u32, bool) {
    let mut below = 0u32;
    let mut equal = false;
    for (slot, &m) in marks.iter().enumerate() {
        below |= u32::from((m as i16) < (mark as i16)) << slot;
        equal |= m == mark;
    }
    (below, equal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::index;

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

    fn table(points: &[Point]) -> (TopBitsIndex, LineTable) {
        let index = TopBitsIndex::build(points, index::bits_for(points.len()));
        let table = LineTable::build(points, &index);
        (index, table)
    }

    /// Every answer the table gives is the oracle's, over random hashes and every point's
    /// neighbourhood (its position, one either side, and positions sharing its mark); returns the
    /// share of the random hashes answered.
    fn check(points: &[Point]) -> f64 {
        let (_, table) = table(points);
        let mut state = 5u32;
        let mut probes: Vec<u32> = (0..4000)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                state
            })
            .collect();
        let low_bits = 32 - table.bits;
        for p in points {
            let bucket = p.position >> table.shift << table.shift;
            probes.extend([
                p.position,
                p.position.wrapping_add(1),
                p.position.wrapping_sub(1),
                bucket,
                bucket.wrapping_sub(1),
                bucket | (u32::MAX >> table.bits),
            ]);
            // The other positions of the point's mark, when marks drop low bits.
            if low_bits > 16 {
                let dropped = (1u32 << (low_bits - 16)) - 1;
                probes.extend([p.position & !dropped, p.position | dropped]);
            }
        }
        probes.extend([0, 1, u32::MAX]);
        let mut answered = 0;
        for (i, &hash) in probes.iter().enumerate() {
            if let Some(node) = table.node(hash) {
                assert_eq!(node, naive(points, hash), "hash {hash:#x}");
                answered += usize::from(i < 4000);
            }
        }
        answered as f64 / 4000.0
    }

    fn random_positions(len: usize, seed: u32) -> Vec<u32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                state
            })
            .collect()
    }

    #[test]
    fn answers_equal_a_linear_scan() {
        for (len, nodes) in [
            (1usize, 1u32),
            (2, 2),
            (7, 3),
            (16, 3),
            (100, 1),
            (1000, 10),
            (5000, 255),
            (4096, 60),
            (200_000, 1000),
            (1_100_000, 60_000),
        ] {
            let mut positions = random_positions(len, len as u32);
            // Both ends of the circle, all-ones low bits, equal positions.
            positions.extend([0, 0, u32::MAX, u32::MAX - 1, 0x00ff_ffff, 0x00ff_ffff]);
            let answered = check(&points(&positions, nodes));
            // On small rings a mark is the top 16 of many more bits, so hashes near a point share
            // its mark and are searched; the random ones mostly are not.
            assert!(answered > 0.9, "{answered} answered, len {len}");
        }
    }

    #[test]
    fn most_random_lookups_are_answered() {
        // 1000 nodes × 160 points, and 10,000 nodes (lines of 4.9 and 6.1 points on average).
        for (len, nodes) in [(160_000usize, 1000u32), (1_600_000, 10_000)] {
            let points = points(&random_positions(len, 9), nodes);
            let (_, table) = table(&points);
            let probes = random_positions(100_000, 77);
            let answered = probes.iter().filter(|&&h| table.node(h).is_some()).count();
            assert!(
                answered > 99_800,
                "{answered} of 100,000 answered, len {len}"
            );
        }
    }

    #[test]
    fn crowded_buckets_are_sent_to_the_search() {
        // Dozens of points in a few buckets (and runs of equal positions), the rest empty.
        let mut positions = Vec::new();
        for bucket in [0u32, 1, 7, 255] {
            for i in 0..40u32 {
                positions.push(bucket << 24 | (i * 3 % 17) << 10);
            }
        }
        let points = points(&positions, 9);
        check(&points);
        let (_, table) = table(&points);
        assert!(table.lines.contains(&Line::UNANSWERED));
    }

    #[test]
    fn one_point_owns_the_circle() {
        let points = [Point {
            position: 77,
            node: 2,
        }];
        let (_, table) = table(&points);
        for hash in [1 << 20, 0x4000_0000, 1 << 31, 0xf000_0000] {
            assert_eq!(table.node(hash), Some(2));
        }
        // Hashes near it share the point's mark (the 16 bits below the top one), and the hashes of
        // an all-ones mark share the empty slots': searched.
        for hash in [0, 76, 77, 78, 0x7fff_ffff, u32::MAX] {
            assert_eq!(table.node(hash), None);
        }
    }

    #[test]
    fn the_vector_compare_is_the_portable_one() {
        let mut state = 3u32;
        for _ in 0..20_000 {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let mut marks: [u16; SLOTS] =
                std::array::from_fn(|i| (state.rotate_left(i as u32 * 5) >> 16) as u16);
            marks[(state % 16) as usize] = EMPTY;
            let mark = match state % 4 {
                0 => marks[(state >> 8) as usize % 16],
                1 => EMPTY,
                2 => 0,
                _ => (state >> 3) as u16,
            };
            assert_eq!(compare(&marks, mark), compare_portable(&marks, mark));
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
            let bits = index::bits_for(points.len() + 60);
            let index = TopBitsIndex::build(&points, bits);
            let mut table = LineTable::build(&points, &index);
            // New points in crowded, empty and wrapping places, including before every other point.
            let mut new: Vec<u32> = (0..40).map(|_| next()).collect();
            new.extend([u32::MAX, points[5].position, points[5].position]);
            new.extend([points[9].position; 20]);
            if first {
                new.push(0);
            }
            new.sort_unstable();
            for &position in &new {
                let at = points.partition_point(|p| p.position <= position);
                points.insert(at, Point { position, node: 55 });
            }
            let index = TopBitsIndex::build(&points, bits);
            assert!(table.fits(&index));
            table.inserted(&points, &index, &new);
            assert_eq!(table, LineTable::build(&points, &index));
        }
    }
}
