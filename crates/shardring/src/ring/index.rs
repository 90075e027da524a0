//! An index over the top bits of a position that narrows a lookup to a handful of points, and the
//! bucket sort that builds the point array and the index in one go.
//!
//! `starts[j]` is the first point whose position's top `bits` bits are at least `j`, so the points of
//! bucket `j` are `starts[j]..starts[j + 1]`. With about one bucket per point a lookup inspects one or
//! two points after a single indexed load, instead of the ~log2(n) dependent loads of a binary search.
//! It costs 4 bytes per bucket, and there are at most as many buckets as points (the largest power of two
//! not above the count), so at most 4 bytes per point on top of the 8 of the point itself.
//!
//! A ring is built with a counting sort of its points by these same buckets ([`BucketSort`]): the
//! counts it needs are the index's `starts`, so the sort leaves the index behind at no extra cost. A
//! few linear passes, several times faster than a comparison sort, and stable, so that ties keep the
//! order the points were generated in. Without an index (`lookup_index(false)`) the counts are dropped
//! after the build.

use super::Point;

/// The most points in any bucket for lookups to scan buckets linearly.
const SCAN: usize = 16;

/// The largest index built: 2^22 buckets (16 MiB).
const MAX_BITS: u32 = 22;

#[derive(Debug, Clone, Default)]
pub(crate) struct TopBitsIndex {
    /// How far a position is shifted right to give its bucket: `32 - bits`. Unused when `starts` is empty.
    shift: u32,
    /// `2^bits + 1` bucket starts; empty when the index is switched off or the ring is empty.
    starts: Vec<u32>,
    /// Whether some bucket holds more than [`SCAN`] points, so lookups binary-search buckets instead
    /// of scanning them (never seen with a shipped hash: buckets hold one or two points on average).
    crowded: bool,
}

/// How many top bits index `len` points: the largest power of two not above the count, so one or two
/// points per bucket on average.
fn bits_for(len: usize) -> u32 {
    (usize::BITS - 1 - len.max(1).leading_zeros()).clamp(1, MAX_BITS)
}

impl TopBitsIndex {
    /// Builds the index for `points` (sorted by position).
    pub(crate) fn build(points: &[Point]) -> TopBitsIndex {
        if points.is_empty() {
            return TopBitsIndex::default();
        }
        let shift = 32 - bits_for(points.len());
        let mut starts = vec![0u32; (1usize << (32 - shift)) + 1];
        for p in points {
            starts[(p.position >> shift) as usize + 1] += 1;
        }
        // Crowded when some bucket counts more than `SCAN` points, checked before the counts become
        // starts.
        let crowded = starts.iter().any(|&c| c as usize > SCAN);
        prefix_sum(&mut starts);
        TopBitsIndex {
            shift,
            starts,
            crowded,
        }
    }

    /// Whether the index is present.
    pub(crate) fn is_built(&self) -> bool {
        !self.starts.is_empty()
    }

    /// Updates the index after points at `positions` (sorted) were inserted into a ring that now has
    /// `len` points. Returns false, changing nothing, when the index must be rebuilt instead (it is
    /// not built, or the new count wants a different number of buckets).
    pub(crate) fn inserted(&mut self, positions: &[u32], len: usize) -> bool {
        if !self.is_built() || 32 - bits_for(len) != self.shift {
            return false;
        }
        // A point inserted in bucket `b` moves the start of every later bucket up by one.
        let mut add = 0u32;
        let mut from = 0usize;
        for &position in positions {
            let bucket = (position >> self.shift) as usize;
            for s in &mut self.starts[from..=bucket] {
                *s += add;
            }
            from = bucket + 1;
            add += 1;
        }
        for s in &mut self.starts[from..] {
            *s += add;
        }
        for &position in positions {
            let bucket = (position >> self.shift) as usize;
            self.crowded |= (self.starts[bucket + 1] - self.starts[bucket]) as usize > SCAN;
        }
        true
    }

    /// The index of the first point at or after `hash`, or `points.len()` if there is none.
    #[inline]
    pub(crate) fn search(&self, points: &[Point], hash: u32) -> usize {
        if self.starts.is_empty() {
            return points.partition_point(|p| p.position < hash);
        }
        let bucket = (hash >> self.shift) as usize;
        let mut i = self.starts[bucket] as usize;
        if self.crowded {
            let hi = self.starts[bucket + 1] as usize;
            return i + points[i..hi].partition_point(|p| p.position < hash);
        }
        // Every point of an earlier bucket is below `hash`, so the answer is the first point from the
        // bucket's start on that is not: a step or two (at most `SCAN + 1`), without loading the
        // bucket's end.
        while i < points.len() && points[i].position < hash {
            i += 1;
        }
        i
    }

    /// The bucket starts, for tests that compare indexes.
    #[cfg(test)]
    pub(crate) fn starts_for_tests(&self) -> Vec<u32> {
        self.starts.clone()
    }

    /// Heap bytes used.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.starts.capacity() * std::mem::size_of::<u32>()
    }
}

/// Sorts one node's points after another by position, ties in the order they were pushed (stable),
/// and builds the [`TopBitsIndex`] of the result on the way.
///
/// A counting sort by the index's own buckets: positions are collected as `u32`s (4 bytes a point)
/// while their buckets are counted; the running sums of the counts give each bucket's end, and one
/// scatter from the last point back to the first moves every point into its bucket, counting each
/// bucket's end down to its start, so that the counts become exactly the index's `starts`. A last
/// pass sorts within buckets (about one point each, rarely more than three) by moving each point past
/// the few of its bucket that are larger. Every step is stable.
///
/// The counts take 4 bytes a bucket (at most 4 bytes a point, 512 KiB for 160,000 points, within a
/// core's L2 cache); without an index they are dropped after the build.
#[derive(Debug)]
pub(crate) struct BucketSort {
    /// How far a position is shifted right to give its bucket (`32 - bits_for(len)`).
    shift: u32,
    /// How many positions fall in each bucket, with one more entry (0) for the end of the last.
    counts: Vec<u32>,
    /// The positions in push order.
    positions: Vec<u32>,
    /// `(node, index of its first position)` in push order.
    runs: Vec<(u32, u32)>,
}

impl BucketSort {
    /// A sort of `len` points (the count decides the buckets).
    pub(crate) fn new(len: usize) -> BucketSort {
        let bits = bits_for(len);
        BucketSort {
            shift: 32 - bits,
            counts: vec![0u32; (1usize << bits) + 1],
            positions: Vec::with_capacity(len),
            runs: Vec::new(),
        }
    }

    /// Starts the points of `node`: the positions pushed from now on are its.
    pub(crate) fn begin_node(&mut self, node: u32) {
        self.runs.push((node, self.positions.len() as u32));
    }

    /// Adds a point of the current node.
    #[inline]
    pub(crate) fn push(&mut self, position: u32) {
        self.positions.push(position);
    }

    /// The points sorted by position, and their index (an empty one unless `index`).
    pub(crate) fn finish(self, index: bool) -> (Vec<Point>, TopBitsIndex) {
        let BucketSort {
            shift,
            counts,
            positions,
            runs,
        } = self;
        if positions.is_empty() {
            return (Vec::new(), TopBitsIndex::default());
        }
        // Each bucket's end, and whether some bucket is crowded.
        let mut starts = counts;
        for &p in &positions {
            starts[(p >> shift) as usize] += 1;
        }
        let mut sum = 0u32;
        let mut most = 0u32;
        for s in &mut starts {
            most = most.max(*s);
            sum += *s;
            *s = sum;
        }
        let crowded = most as usize > SCAN;
        // Room for 1/64 more points: adding a few nodes later does not reallocate (and copy) the array.
        let mut sorted = Vec::with_capacity(positions.len() + positions.len() / 64);
        sorted.resize(
            positions.len(),
            Point {
                position: 0,
                node: 0,
            },
        );
        // From the last point back: each bucket fills from its end, and its end counts down to its
        // start. Points hold their run's number (their rank in push order) rather than their node
        // until they are in order.
        let mut end = positions.len();
        for (rank, &(_, first)) in runs.iter().enumerate().rev() {
            for &position in positions[first as usize..end].iter().rev() {
                let slot = &mut starts[(position >> shift) as usize];
                *slot -= 1;
                sorted[*slot as usize] = Point {
                    position,
                    node: rank as u32,
                };
            }
            end = first as usize;
        }
        drop(positions);
        let nodes: Vec<u32> = runs.iter().map(|r| r.0).collect();
        if crowded {
            // Should positions crowd together (they do not for any hash we ship), let the library
            // sort the crowded buckets.
            for bucket in starts.windows(2) {
                sorted[bucket[0] as usize..bucket[1] as usize].sort_by_key(|p| p.position);
            }
            for p in &mut sorted {
                p.node = nodes[p.node as usize];
            }
        } else {
            sort_within_buckets(&mut sorted, &nodes);
        }
        let index = if index {
            TopBitsIndex {
                shift,
                starts,
                crowded,
            }
        } else {
            TopBitsIndex::default()
        };
        (sorted, index)
    }
}

/// A stable insertion sort of `points`, whose points are out of order only within buckets of at most
/// [`SCAN`] points, and hold their rank in push order in place of their node: `nodes[rank]` is put
/// back on the way.
///
/// The point that ends the sorted prefix is held in a register (`carry`): each next point either
/// follows it or takes its place, a choice made without a branch, as which one it is cannot be
/// predicted (half the buckets of two points are out of order). As `position << 32 | rank`, points
/// compare by position, then push order: the choice is a `min` and a `max`, two instructions on the
/// loop's critical path. Only a point that must move past two or more others takes a branch, a few
/// times in a thousand.
fn sort_within_buckets(points: &mut [Point], nodes: &[u32]) {
    let Some(&first) = points.first() else {
        return;
    };
    let key = |p: Point| (u64::from(p.position) << 32) | u64::from(p.node);
    let point = |key: u64| Point {
        position: (key >> 32) as u32,
        node: nodes[key as u32 as usize],
    };
    let mut carry = key(first);
    // The position of the last point written, before `carry`.
    let mut last = 0u32;
    for i in 1..points.len() {
        let next = key(points[i]);
        let lo = point(next.min(carry));
        carry = next.max(carry);
        points[i - 1] = lo;
        if lo.position < last {
            // Earlier points of the same position were pushed before this one: it goes after them.
            let mut j = i - 1;
            while j > 0 && points[j - 1].position > lo.position {
                points[j] = points[j - 1];
                j -= 1;
            }
            points[j] = lo;
            last = points[i - 1].position;
        } else {
            last = lo.position;
        }
    }
    let n = points.len();
    points[n - 1] = point(carry);
}

/// Turns per-bucket counts in `starts[1..]` into bucket starts.
fn prefix_sum(starts: &mut [u32]) {
    let mut sum = 0u32;
    for s in starts.iter_mut() {
        sum += *s;
        *s = sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(positions: &[u32]) -> Vec<Point> {
        positions
            .iter()
            .enumerate()
            .map(|(i, &position)| Point {
                position,
                node: i as u32,
            })
            .collect()
    }

    #[test]
    fn sort_is_stable_and_indexes_like_build() {
        let mut state = 7u32;
        let mut positions: Vec<u32> = (0..5000)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                state
            })
            .collect();
        // Ties, and a crowd in one bucket.
        positions.extend([5, 5, 5, u32::MAX, u32::MAX, 0]);
        positions.extend((0..3000).map(|i| 0x8000_0000 + (3000 - i)));
        let input = points(&positions);
        let mut sort = BucketSort::new(input.len());
        // One "node" per point, so the runs cover every push order.
        for &p in &input {
            sort.begin_node(p.node);
            sort.push(p.position);
        }
        let (sorted, index) = sort.finish(true);
        let mut expected = input.clone();
        expected.sort_by_key(|p| p.position);
        assert_eq!(sorted, expected);
        assert_eq!(index.starts, TopBitsIndex::build(&sorted).starts);
        assert!(index.crowded);
    }

    #[test]
    fn uncrowded_sort_keeps_ties_in_push_order() {
        // Positions that repeat up to three times (pushed by different "nodes", in shuffled order),
        // in buckets of a few points: the branch-free pass, not the crowded fallback.
        let mut state = 11u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        };
        let mut input = Vec::new();
        for _ in 0..3000 {
            let position = next();
            for _ in 0..=next() % 3 {
                input.push(position);
            }
        }
        for i in (1..input.len()).rev() {
            input.swap(i, next() as usize % (i + 1));
        }
        for len in [0, 1, 2, 3, 100, input.len()] {
            let input = points(&input[..len]);
            let mut sort = BucketSort::new(input.len());
            for &p in &input {
                sort.begin_node(p.node);
                sort.push(p.position);
            }
            let (sorted, index) = sort.finish(true);
            let mut expected = input.clone();
            expected.sort_by_key(|p| p.position);
            assert_eq!(sorted, expected, "{len} points");
            assert_eq!(index.starts, TopBitsIndex::build(&sorted).starts);
            assert!(!index.crowded);
            // Without the index: the same points, no index kept.
            let mut sort = BucketSort::new(input.len());
            for &p in &input {
                sort.begin_node(p.node);
                sort.push(p.position);
            }
            let (unindexed, index) = sort.finish(false);
            assert_eq!(unindexed, sorted);
            assert!(!index.is_built());
        }
    }

    #[test]
    fn inserting_updates_the_index_like_a_rebuild() {
        let mut positions: Vec<u32> = (0..4096u32).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
        positions.sort_unstable();
        let mut index = TopBitsIndex::build(&points(&positions));
        let new = [0u32, 7, 0x1234_5678, 0x1234_5679, 0xFFFF_FFFF];
        positions.extend(new);
        positions.sort_unstable();
        assert!(index.inserted(&new, positions.len()));
        assert_eq!(
            index.starts,
            TopBitsIndex::build(&points(&positions)).starts
        );
        // Crossing a power of two asks for a rebuild.
        assert!(!index.inserted(&new, 8192));
    }
}
