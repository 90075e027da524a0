//! An index over the top bits of a position that narrows a lookup to a handful of points, and the
//! bucket sort that builds the point array and the index in one go.
//!
//! `starts[j]` is the first point whose position's top `bits` bits are at least `j`, so the points of
//! bucket `j` are `starts[j]..starts[j + 1]`. With about one bucket per point a lookup inspects one or
//! two points after a single indexed load, instead of the ~log2(n) dependent loads of a binary search.
//! It costs 4 bytes per bucket, and there are at most as many buckets as points (the largest power of two
//! not above the count), so at most 4 bytes per point on top of the 8 of the point itself.
//!
//! A ring is built with a radix sort of its points ([`BucketSort`]): a few linear passes, several times
//! faster than a comparison sort, stable so that ties keep the order the points were generated in.

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

/// Bits of the first radix digit: 2048 counts (8 KiB) stay in L1 while the points stream past.
const TOP_BITS: u32 = 11;

/// Sorts one node's points after another by position, ties in the order they were pushed (stable).
///
/// A most-significant-digit radix sort that needs no second point array: positions are collected as
/// `u32`s (4 bytes a point) with the counts of their top 11 bits; one scatter writes the points into
/// the result grouped by those bits; each group (of about `points / 2048`) is then sorted in place by
/// its next bits through a small scratch buffer, and an insertion pass finishes what is left (points
/// that share both digits, about one in two). Every step is stable. Keeping the temporary memory small
/// matters as much as the passes: a build whose temporaries exceed the allocator's trim threshold pays
/// for fresh pages on every build.
#[derive(Debug)]
pub(crate) struct BucketSort {
    /// How many positions have each value of the top digit.
    counts: Vec<u32>,
    /// The positions in push order.
    positions: Vec<u32>,
    /// `(node, index of its first position)` in push order.
    runs: Vec<(u32, u32)>,
}

impl BucketSort {
    /// A sort of up to `len` points.
    pub(crate) fn new(len: usize) -> BucketSort {
        BucketSort {
            counts: vec![0u32; 1 << TOP_BITS],
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
        self.counts[(position >> (32 - TOP_BITS)) as usize] += 1;
        self.positions.push(position);
    }

    /// The points sorted by position.
    pub(crate) fn finish(self) -> Vec<Point> {
        let BucketSort {
            counts,
            positions,
            runs,
        } = self;
        // Group starts: `starts[d]..starts[d + 1]` holds the points whose top digit is `d`.
        let mut starts = Vec::with_capacity(counts.len() + 1);
        let mut sum = 0u32;
        starts.push(0);
        for c in &counts {
            sum += c;
            starts.push(sum);
        }
        drop(counts);
        let mut next = starts.clone();
        // Room for 1/64 more points: adding a few nodes later does not reallocate (and copy) the array.
        let mut sorted = Vec::with_capacity(positions.len() + positions.len() / 64);
        sorted.resize(
            positions.len(),
            Point {
                position: 0,
                node: 0,
            },
        );
        for (i, &(node, first)) in runs.iter().enumerate() {
            let end = runs.get(i + 1).map_or(positions.len(), |r| r.1 as usize);
            for &position in &positions[first as usize..end] {
                let slot = &mut next[(position >> (32 - TOP_BITS)) as usize];
                sorted[*slot as usize] = Point { position, node };
                *slot += 1;
            }
        }
        drop(positions);
        // Each group by its next bits: enough of them for about one point per value.
        let mut scratch = Vec::new();
        let mut sub_counts = Vec::new();
        for group in starts.windows(2) {
            let group = &mut sorted[group[0] as usize..group[1] as usize];
            if group.len() < 16 {
                continue; // The insertion pass below handles small groups well.
            }
            let bits = (usize::BITS - group.len().leading_zeros() + 1).min(32 - TOP_BITS);
            let shift = 32 - TOP_BITS - bits;
            let mask = (1u32 << bits) - 1;
            sub_counts.clear();
            sub_counts.resize((1usize << bits) + 1, 0u32);
            for p in group.iter() {
                sub_counts[((p.position >> shift) & mask) as usize + 1] += 1;
            }
            prefix_sum(&mut sub_counts);
            scratch.clear();
            scratch.extend_from_slice(group);
            for p in &scratch {
                let slot = &mut sub_counts[((p.position >> shift) & mask) as usize];
                group[*slot as usize] = *p;
                *slot += 1;
            }
        }
        // A stable insertion sort: points now only move past the few that share their digits.
        // Should positions crowd together (they do not for any hash we ship), let the library finish.
        let mut budget = 8 * sorted.len();
        for i in 1..sorted.len() {
            let p = sorted[i];
            if sorted[i - 1].position <= p.position {
                continue;
            }
            let mut j = i;
            while j > 0 && sorted[j - 1].position > p.position {
                sorted[j] = sorted[j - 1];
                j -= 1;
            }
            sorted[j] = p;
            budget = budget.saturating_sub(i - j);
            if budget == 0 {
                sorted.sort_by_key(|p| p.position);
                break;
            }
        }
        sorted
    }
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
        let sorted = sort.finish();
        let index = TopBitsIndex::build(&sorted);
        let mut expected = input.clone();
        expected.sort_by_key(|p| p.position);
        assert_eq!(sorted, expected);
        assert_eq!(index.starts, TopBitsIndex::build(&sorted).starts);
        assert!(TopBitsIndex::build(&sorted).crowded);
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
