//! The pool's heaviest keys: candidates the request path offers (keys whose sketch estimate reached the
//! bar), re-ranked by the ticker against the sketch every [`super::REFRESH`], published as one
//! [`HotSet`] snapshot (arc-swap) that requests read without a lock.
//!
//! The tracker keeps more keys than it reports (`2K + 8`): the published set holds them all, so a key
//! just below the top K does not offer itself again on every request; the bar is the smallest tracked
//! estimate once the tracker is full. Offers go through a bounded lock-free queue and are made only when
//! it has room, so at most [`CANDIDATES`] keys are copied per refresh, whatever the traffic.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use bytes::Bytes;
use crossbeam_queue::ArrayQueue;

use super::sketch::Sketch;

/// How many offers wait for the next refresh at most.
pub(crate) const CANDIDATES: usize = 256;

/// The lowest bar: a key seen once in a window is not a candidate.
const MIN_BAR: u32 = 2;

/// One ranked key.
#[derive(Debug, Clone)]
pub(crate) struct Ranked {
    /// Its hash ([`super::sketch::key_hash`]).
    pub(crate) hash: u64,
    /// The key.
    pub(crate) key: Bytes,
    /// Its estimated requests over the window.
    pub(crate) count: u32,
}

/// A published ranking.
#[derive(Debug, Default)]
pub(crate) struct HotSet {
    /// The top keys, heaviest first (at most K).
    pub(crate) top: Vec<Ranked>,
    /// Hashes of the top keys, sorted (for [`HotSet::is_top`]).
    top_hashes: Vec<u64>,
    /// Hashes of every tracked key, sorted.
    tracked_hashes: Vec<u64>,
}

impl HotSet {
    /// Whether `hash` is one of the top keys.
    pub(crate) fn is_top(&self, hash: u64) -> bool {
        self.top_hashes.binary_search(&hash).is_ok()
    }

    /// Whether `hash` is tracked (top or close to it).
    fn is_tracked(&self, hash: u64) -> bool {
        self.tracked_hashes.binary_search(&hash).is_ok()
    }
}

/// The ranking of one pool.
#[derive(Debug)]
pub(crate) struct Tracker {
    /// How many keys are reported (and cached).
    k: usize,
    /// Offers waiting for the next refresh.
    candidates: ArrayQueue<(u64, Bytes)>,
    /// A key offers itself once its estimate reaches this. Relaxed: a lone number; a stale read only
    /// changes whether one request offers its key.
    bar: AtomicU32,
    /// The latest ranking.
    published: ArcSwap<HotSet>,
    /// The tracked keys (only the ticker takes this lock).
    tracked: Mutex<Vec<(u64, Bytes)>>,
}

impl Tracker {
    /// A tracker reporting the top `k` keys.
    pub(crate) fn new(k: usize) -> Tracker {
        Tracker {
            k,
            candidates: ArrayQueue::new(CANDIDATES),
            bar: AtomicU32::new(MIN_BAR),
            published: ArcSwap::from_pointee(HotSet::default()),
            tracked: Mutex::new(Vec::new()),
        }
    }

    /// How many keys are tracked at most.
    fn capacity(&self) -> usize {
        2 * self.k + 8
    }

    /// The request path: a key whose estimate is `estimate`. Returns whether it is a top key now.
    pub(crate) fn offer(&self, hash: u64, key: &[u8], estimate: u32) -> bool {
        if estimate < self.bar.load(Relaxed) {
            return false;
        }
        let set = self.published.load();
        if set.is_top(hash) {
            return true;
        }
        if !set.is_tracked(hash) && !self.candidates.is_full() {
            let _ = self.candidates.push((hash, Bytes::copy_from_slice(key)));
        }
        false
    }

    /// The latest ranking.
    pub(crate) fn current(&self) -> Arc<HotSet> {
        self.published.load_full()
    }

    /// Re-ranks the tracked keys and the offers against `sketch` and publishes the result.
    pub(crate) fn refresh(&self, sketch: &Sketch) {
        let Ok(mut tracked) = self.tracked.lock() else {
            return;
        };
        while let Some((hash, key)) = self.candidates.pop() {
            if !tracked.iter().any(|(h, _)| *h == hash) {
                tracked.push((hash, key));
            }
        }
        let mut rows: Vec<Ranked> = tracked
            .drain(..)
            .map(|(hash, key)| Ranked {
                count: sketch.estimate(hash),
                hash,
                key,
            })
            .filter(|r| r.count > 0)
            .collect();
        rows.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        rows.truncate(self.capacity());
        let bar = if rows.len() == self.capacity() {
            rows.last().map_or(MIN_BAR, |r| r.count.max(MIN_BAR))
        } else {
            MIN_BAR
        };
        tracked.extend(rows.iter().map(|r| (r.hash, r.key.clone())));
        let mut tracked_hashes: Vec<u64> = rows.iter().map(|r| r.hash).collect();
        tracked_hashes.sort_unstable();
        rows.truncate(self.k);
        let mut top_hashes: Vec<u64> = rows.iter().map(|r| r.hash).collect();
        top_hashes.sort_unstable();
        self.published.store(Arc::new(HotSet {
            top: rows,
            top_hashes,
            tracked_hashes,
        }));
        self.bar.store(bar, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hot_keys::sketch::key_hash;

    /// Counts `key` `n` times, offering it as the request path does.
    fn hit(t: &Tracker, s: &Sketch, key: &str, n: u32) {
        let h = key_hash(key.as_bytes());
        for _ in 0..n {
            let e = s.add(h);
            t.offer(h, key.as_bytes(), e);
        }
    }

    #[test]
    fn the_heaviest_keys_are_ranked_first() {
        let (t, s) = (Tracker::new(3), Sketch::new());
        for (i, n) in [5u32, 50, 7, 30, 1, 40, 2].iter().enumerate() {
            hit(&t, &s, &format!("k{i}"), *n);
        }
        t.refresh(&s);
        let top: Vec<_> = t
            .current()
            .top
            .iter()
            .map(|r| (r.key.clone(), r.count))
            .collect();
        assert_eq!(
            top,
            [
                (Bytes::from("k1"), 50),
                (Bytes::from("k5"), 40),
                (Bytes::from("k3"), 30)
            ]
        );
        assert!(t.current().is_top(key_hash(b"k1")));
        assert!(!t.current().is_top(key_hash(b"k0")));
    }

    #[test]
    fn memory_stays_bounded_under_a_flood_of_distinct_keys() {
        let (t, s) = (Tracker::new(10), Sketch::new());
        for i in 0..100_000u32 {
            hit(&t, &s, &format!("key{}", i % 50_000), 1);
            if i % 10_000 == 0 {
                t.refresh(&s);
            }
        }
        assert!(t.candidates.len() <= CANDIDATES);
        t.refresh(&s);
        assert!(t.tracked.lock().unwrap().len() <= t.capacity());
        assert!(t.current().top.len() <= 10);
    }
}
