//! An index over the top bits of a position that narrows a lookup to a handful of points.
//!
//! `starts[j]` is the first point whose position's top `bits` bits are at least `j`, so the points of
//! bucket `j` are `starts[j]..starts[j + 1]`. With about one bucket per point a lookup inspects one or
//! two points after a single indexed load, instead of the ~log2(n) dependent loads of a binary search.
//! It costs 4 bytes per bucket, and there are at most as many buckets as points (the largest power of two
//! not above the count), so at most 4 bytes per point on top of the 8 of the point itself.

use super::Point;

/// The largest index built: 2^22 buckets (16 MiB).
const MAX_BITS: u32 = 22;

#[derive(Debug, Clone, Default)]
pub(crate) struct TopBitsIndex {
    /// How far a position is shifted right to give its bucket: `32 - bits`. Unused when `starts` is empty.
    shift: u32,
    /// `2^bits + 1` bucket starts; empty when the index is switched off or the ring is empty.
    starts: Vec<u32>,
}

impl TopBitsIndex {
    /// Builds the index for `points` (sorted by position).
    pub(crate) fn build(points: &[Point]) -> TopBitsIndex {
        if points.is_empty() {
            return TopBitsIndex::default();
        }
        // The largest power of two not above the point count: one or two points per bucket on average.
        let bits = (usize::BITS - 1 - points.len().leading_zeros()).clamp(1, MAX_BITS);
        let shift = 32 - bits;
        let buckets = 1usize << bits;
        let mut starts = Vec::with_capacity(buckets + 1);
        let mut i = 0usize;
        for bucket in 0..buckets {
            while i < points.len() && ((points[i].position >> shift) as usize) < bucket {
                i += 1;
            }
            starts.push(i as u32);
        }
        starts.push(points.len() as u32);
        TopBitsIndex { shift, starts }
    }

    /// Whether the index is present.
    pub(crate) fn is_built(&self) -> bool {
        !self.starts.is_empty()
    }

    /// The index of the first point at or after `hash`, or `points.len()` if there is none.
    #[inline]
    pub(crate) fn search(&self, points: &[Point], hash: u32) -> usize {
        if self.starts.is_empty() {
            return points.partition_point(|p| p.position < hash);
        }
        let bucket = (hash >> self.shift) as usize;
        let lo = self.starts[bucket] as usize;
        let hi = self.starts[bucket + 1] as usize;
        lo + points[lo..hi].partition_point(|p| p.position < hash)
    }

    /// Heap bytes used.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.starts.capacity() * std::mem::size_of::<u32>()
    }
}
