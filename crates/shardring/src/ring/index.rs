//! An index over the top bits of a position that narrows a lookup to a handful of points.
//!
//! `starts[j]` is the first point whose position's top `bits` bits are at least `j`, so the points of
//! bucket `j` are `starts[j]..starts[j + 1]`. With about one bucket per point a lookup inspects one or
//! two points after a single indexed load, instead of the ~log2(n) dependent loads of a binary search.
//! It costs 4 bytes per bucket, and there are at most as many buckets as points (the largest power of two
//! not above the count), so at most 4 bytes per point on top of the 8 of the point itself.
//!
//! A ring is built with a counting sort of its points by these same buckets ([`super::build`]): the
//! counts it needs are the index's `starts`, so the sort leaves the index behind at no extra cost.

use super::Point;

/// The most points in any bucket for lookups to scan buckets linearly.
pub(crate) const SCAN: usize = 16;

/// Points [`TopBitsIndex::search_counting`] compares at once (32 bytes).
const WINDOW: usize = 4;

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
///
/// Fewer buckets would shrink the index below the L2 cache (512 KiB at 1000 nodes × 160 points; half
/// as many buckets make it 256 KiB), but lookups then scan more points, and over the bench crate's cold
/// pool they came out slower, single and batched, at half and at a quarter of the buckets. The points,
/// 1.25 MiB, are the larger part of a cold lookup's footprint either way.
pub(crate) fn bits_for(len: usize) -> u32 {
    (usize::BITS - 1 - len.max(1).leading_zeros()).clamp(1, MAX_BITS)
}

impl TopBitsIndex {
    /// Builds the index for `points` (sorted by position), with `2^bits` buckets.
    pub(crate) fn build(points: &[Point], bits: u32) -> TopBitsIndex {
        if points.is_empty() {
            return TopBitsIndex::default();
        }
        let shift = 32 - bits;
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

    /// How many top bits the index uses (0 when it is not built).
    pub(crate) fn bits(&self) -> u32 {
        if self.is_built() {
            32 - self.shift
        } else {
            0
        }
    }

    /// The index whose bucket starts (`2^bits + 1` of them, for positions shifted right by `shift`)
    /// are `starts`; `crowded` if a bucket holds more than [`SCAN`] points.
    pub(crate) fn from_starts(shift: u32, starts: Vec<u32>, crowded: bool) -> TopBitsIndex {
        debug_assert_eq!(starts.len(), (1usize << (32 - shift)) + 1);
        TopBitsIndex {
            shift,
            starts,
            crowded,
        }
    }

    /// The `2^bits + 1` bucket starts (empty when the index is not built): bucket `j`'s points are
    /// `starts[j]..starts[j + 1]`.
    pub(crate) fn starts(&self) -> &[u32] {
        &self.starts
    }

    /// Whether the index is present.
    pub(crate) fn is_built(&self) -> bool {
        !self.starts.is_empty()
    }

    /// Updates the index after points at `positions` (sorted) were inserted into the ring. Returns
    /// false, changing nothing, when the index must be rebuilt instead (it is not built, or the ring
    /// now wants `bits` bits, a different number of buckets).
    pub(crate) fn inserted(&mut self, positions: &[u32], bits: u32) -> bool {
        if !self.is_built() || bits != self.bits() {
            return false;
        }
        self.shift_starts(positions, |start, by| start + by);
        for &position in positions {
            let bucket = (position >> self.shift) as usize;
            self.crowded |= (self.starts[bucket + 1] - self.starts[bucket]) as usize > SCAN;
        }
        true
    }

    /// Updates the index after points at `positions` (sorted) were removed from a ring that now has
    /// `len` points; as [`inserted`](TopBitsIndex::inserted). Buckets only lose points, so a crowded
    /// index stays marked crowded (lookups then search buckets, which is right either way).
    pub(crate) fn removed(&mut self, positions: &[u32], len: usize, bits: u32) -> bool {
        if !self.is_built() || len == 0 || bits != self.bits() {
            return false;
        }
        self.shift_starts(positions, |start, by| start - by);
        true
    }

    /// Moves every bucket start by `moved(start, n)`, `n` the number of `positions` (sorted) in
    /// earlier buckets: a point inserted in (or removed from) bucket `b` moves the start of every
    /// later bucket by one.
    fn shift_starts(&mut self, positions: &[u32], moved: impl Fn(u32, u32) -> u32) {
        let mut by = 0u32;
        let mut from = 0usize;
        for &position in positions {
            let bucket = (position >> self.shift) as usize;
            for s in &mut self.starts[from..=bucket] {
                *s = moved(*s, by);
            }
            from = bucket + 1;
            by += 1;
        }
        for s in &mut self.starts[from..] {
            *s = moved(*s, by);
        }
    }

    /// The index of the first point at or after `hash`, or `points.len()` if there is none.
    #[inline]
    pub(crate) fn search(&self, points: &[Point], hash: u32) -> usize {
        if self.starts.is_empty() {
            return points.partition_point(|p| p.position < hash);
        }
        self.search_from(points, self.bucket_start(hash), hash)
    }

    /// The first point of `hash`'s bucket, where [`search_from`](TopBitsIndex::search_from) starts. The
    /// index must be built.
    #[inline]
    pub(crate) fn bucket_start(&self, hash: u32) -> usize {
        self.starts[(hash >> self.shift) as usize] as usize
    }

    /// Asks the cache for `hash`'s bucket start (the index entry a search loads first). When the index
    /// is not built, the address asked for lies past an empty vector: a line nobody reads.
    #[inline]
    pub(crate) fn prefetch_bucket(&self, hash: u32) {
        super::prefetch::prefetch_item(&self.starts, (hash >> self.shift) as usize);
    }

    /// [`search`](TopBitsIndex::search) from `start`, the [`bucket_start`](TopBitsIndex::bucket_start) of
    /// `hash`. The index must be built.
    #[inline]
    fn search_from(&self, points: &[Point], start: usize, hash: u32) -> usize {
        let mut i = start;
        if self.crowded {
            let hi = self.starts[(hash >> self.shift) as usize + 1] as usize;
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

    /// As [`search`](TopBitsIndex::search), counting a bucket's points below `hash` [`WINDOW`] at a time
    /// without a branch on their positions; what lookups use. `search` stops at the first point not
    /// below `hash`, a branch the CPU mispredicts on about every other lookup of keys in an order it has
    /// not learnt, and the misprediction also throws away the lookups already under way, so over the
    /// bench crate's cold pool counting is much the faster, with xxh3 and with CRC-32 keys. The branch
    /// wins only over keys repeated in the same order, which the branch predictor learns (the bench
    /// crate's hot pool). BENCHMARKS.md, "lookup-floors", has both orders.
    #[inline]
    pub(crate) fn search_counting(&self, points: &[Point], hash: u32) -> usize {
        if !self.counts() {
            return self.search(points, hash);
        }
        // Every point of an earlier bucket is below `hash` and none of a later one is, so the answer is
        // the bucket's start plus how many points from there on are below `hash`.
        count_below(points, self.bucket_start(hash), hash)
    }

    /// Whether lookups count a bucket's points with [`count_below`]: the index is built (so the ring
    /// has points) and not crowded.
    #[inline(always)]
    pub(crate) fn counts(&self) -> bool {
        !self.starts.is_empty() && !self.crowded
    }

    /// Whether some bucket holds more than [`SCAN`] points, for tests.
    #[cfg(test)]
    pub(crate) fn is_crowded(&self) -> bool {
        self.crowded
    }

    /// The bucket starts, for tests that compare indexes.
    #[cfg(test)]
    pub(crate) fn starts_for_tests(&self) -> Vec<u32> {
        self.starts.clone()
    }

    /// How many points the index covers (0 when it is not built).
    pub(crate) fn points_covered(&self) -> usize {
        self.starts.last().map_or(0, |&s| s as usize)
    }

    /// Heap bytes used.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.starts.capacity() * std::mem::size_of::<u32>()
    }
}

/// The first point at or after `hash`, counted from `start`, the first point of `hash`'s bucket in an
/// index that is not crowded: `start` plus how many points from there on are below `hash`, counted
/// [`WINDOW`] at a time without a branch on their positions (see
/// [`TopBitsIndex::search_counting`]). Forced inline: out of line it was a call per key in
/// `Ring::lookup_many`'s last pass, whose set-up (the hash broadcast for the tail's vector loop) ran on
/// every call.
#[inline(always)]
pub(crate) fn count_below(points: &[Point], start: usize, hash: u32) -> usize {
    let mut i = start;
    loop {
        let Some(window) = points.get(i..i + WINDOW) else {
            return count_tail(points, i, hash);
        };
        let below = window
            .iter()
            .map(|p| usize::from(p.position < hash))
            .sum::<usize>();
        i += below;
        if below < WINDOW {
            return i;
        }
    }
}

/// [`count_below`] over the last points of the ring, fewer than a [`WINDOW`]: rare, and out of the
/// way of the common path.
#[cold]
#[inline(never)]
fn count_tail(points: &[Point], from: usize, hash: u32) -> usize {
    from + points[from..].iter().filter(|p| p.position < hash).count()
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
    fn counting_search_finds_what_the_scan_finds() {
        let mut state = 11u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        };
        for len in [1usize, 2, 3, 4, 5, 7, 64, 1000, 4099] {
            let mut positions: Vec<u32> = (0..len).map(|_| next()).collect();
            // Runs of equal and adjacent positions, and both ends of the circle.
            positions.extend([0, 0, 5, 5, 5, 5, 5, 6, u32::MAX - 1, u32::MAX, u32::MAX]);
            positions.sort_unstable();
            let points = points(&positions);
            let index = TopBitsIndex::build(&points, bits_for(points.len()));
            let mut probes: Vec<u32> = (0..2000).map(|_| next()).collect();
            probes.extend(
                positions
                    .iter()
                    .flat_map(|&p| [p, p.wrapping_add(1), p.wrapping_sub(1)]),
            );
            probes.extend([0, 1, u32::MAX]);
            for hash in probes {
                let want = points.partition_point(|p| p.position < hash);
                assert_eq!(
                    index.search(&points, hash),
                    want,
                    "scan, len {len}, hash {hash}"
                );
                assert_eq!(
                    index.search_counting(&points, hash),
                    want,
                    "count, len {len}, hash {hash}"
                );
            }
        }
    }

    #[test]
    fn inserting_updates_the_index_like_a_rebuild() {
        let mut positions: Vec<u32> = (0..4096u32).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
        positions.sort_unstable();
        let mut index = TopBitsIndex::build(&points(&positions), 12);
        let new = [0u32, 7, 0x1234_5678, 0x1234_5679, 0xFFFF_FFFF];
        positions.extend(new);
        positions.sort_unstable();
        assert!(index.inserted(&new, 12));
        assert_eq!(
            index.starts,
            TopBitsIndex::build(&points(&positions), 12).starts
        );
        // Another number of buckets asks for a rebuild.
        assert!(!index.inserted(&new, 13));
    }
}
