//! A count-min sketch over a sliding window, shared by every client of a pool without a lock.
//!
//! Each key's 64-bit hash picks one counter in each of [`ROWS`] rows (13-bit slices of the hash, so one
//! hash is enough); adding bumps those counters and the estimate is the smallest of them: never below
//! the true count, and above it by at most `e / WIDTH` of the window's requests with probability
//! `1 - e^-ROWS` (Cormode and Muthukrishnan). The window slides in two halves: requests count into the
//! current half, estimates add both halves, and every half-window the older half is zeroed and becomes
//! current, so an estimate covers between a half and a whole window.
//!
//! Memory is fixed: 2 halves × 4 rows × 8192 counters × 4 bytes = 256 KiB per pool. Cost per request:
//! four relaxed `fetch_add`s and four relaxed loads, no lock, no allocation.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// Counters per row (a power of two).
const WIDTH: usize = 1 << 13;
/// Rows (independent slices of the key's hash).
const ROWS: usize = 4;

/// The sketch: two window halves of `ROWS × WIDTH` counters.
///
/// Every atomic here is `Relaxed`: each counter is an independent tally, and a reader racing a rotation
/// may see a half partly zeroed, which only makes that one estimate low for that moment.
#[derive(Debug)]
pub(crate) struct Sketch {
    /// The two halves of the window, each `ROWS × WIDTH` counters, row by row.
    halves: [Box<[AtomicU32]>; 2],
    /// Which half requests count into (0 or 1).
    current: AtomicUsize,
}

impl Sketch {
    /// An empty sketch.
    pub(crate) fn new() -> Sketch {
        let half = || (0..ROWS * WIDTH).map(|_| AtomicU32::new(0)).collect();
        Sketch {
            halves: [half(), half()],
            current: AtomicUsize::new(0),
        }
    }

    /// The counter of row `row` for `hash`.
    fn cell(row: usize, hash: u64) -> usize {
        row * WIDTH + ((hash >> (row * 16)) as usize & (WIDTH - 1))
    }

    /// Counts one request for `hash` and returns the key's estimate over the window (this one included).
    pub(crate) fn add(&self, hash: u64) -> u32 {
        let cur = self.current.load(Relaxed) & 1;
        let (now, old) = (&self.halves[cur], &self.halves[cur ^ 1]);
        let mut est_now = u32::MAX;
        let mut est_old = u32::MAX;
        for row in 0..ROWS {
            let i = Sketch::cell(row, hash);
            est_now = est_now.min(now[i].fetch_add(1, Relaxed).wrapping_add(1));
            est_old = est_old.min(old[i].load(Relaxed));
        }
        est_now.saturating_add(est_old)
    }

    /// The key's estimate over the window, without counting.
    pub(crate) fn estimate(&self, hash: u64) -> u32 {
        let mut est = [u32::MAX; 2];
        for (half, e) in self.halves.iter().zip(&mut est) {
            for row in 0..ROWS {
                *e = (*e).min(half[Sketch::cell(row, hash)].load(Relaxed));
            }
        }
        est[0].saturating_add(est[1])
    }

    /// Slides the window by a half: zeroes the older half and counts into it from now on.
    pub(crate) fn rotate(&self) {
        let older = (self.current.load(Relaxed) & 1) ^ 1;
        for c in self.halves[older].iter() {
            c.store(0, Relaxed);
        }
        self.current.store(older, Relaxed);
    }
}

/// The hash the sketch, the tracker and the cache know a key by (xxh3: fast on short keys, fixed seed).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Never below the true count, and close to it for a small key set.
        #[test]
        fn estimates_bound_the_true_counts(keys in proptest::collection::vec(0u16..2000, 1..3000)) {
            let s = Sketch::new();
            let mut truth = std::collections::HashMap::new();
            for k in &keys {
                s.add(key_hash(&k.to_le_bytes()));
                *truth.entry(*k).or_insert(0u32) += 1;
            }
            for (k, n) in truth {
                let e = s.estimate(key_hash(&k.to_le_bytes()));
                prop_assert!(e >= n);
                prop_assert!(e <= n + 8, "key {} counted {} estimated {}", k, n, e);
            }
        }
    }

    #[test]
    fn two_rotations_forget_everything() {
        let s = Sketch::new();
        let h = key_hash(b"k");
        for _ in 0..10 {
            s.add(h);
        }
        s.rotate();
        assert_eq!(s.estimate(h), 10, "the previous half still counts");
        s.add(h);
        assert_eq!(s.estimate(h), 11);
        s.rotate();
        assert_eq!(s.estimate(h), 1);
        s.rotate();
        assert_eq!(s.estimate(h), 0);
    }
}
