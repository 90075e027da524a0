//! Live per-node request counters, and the load statistics computed from them.
//!
//! # Why striped
//! A lookup that bumps one shared counter per node makes every thread that hits the same node fight over
//! one cache line. [`LoadCounters`] keeps several *stripes*, each a full row of per-node counters on cache
//! lines of its own; each thread picks one stripe for its life, so two threads on different stripes never
//! write to the same line. Reading the counts sums the stripes, which is cheap next to how rarely it is done.
//!
//! Counting costs a fraction of a lookup on one thread; with two threads the striped counters nearly
//! double the counted lookups a second, where a single shared row of counters loses ground to the
//! contended lines (BENCHMARKS.md, "load counters", with the command that measures it).
//!
//! # Recent traffic
//! Counters count from their creation (a [`SharedRing`](crate::shared::SharedRing) makes fresh ones with
//! every published ring) or from the last [`reset`](LoadCounters::reset) or [`take`](LoadCounters::take).
//! Calling `take` once per interval gives tumbling windows; feeding those windows to a [`DecayingLoad`]
//! gives an exponentially decaying view of recent traffic.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Counters per cache-line pair (2 × 64 bytes): stripes start this many counters apart at least, and one
/// pair of lines of padding separates the end of one stripe from the start of the next, so that neither
/// false sharing nor the adjacent-line prefetcher couples two stripes.
const LINE_PAIR: usize = 16;

/// The most stripes a set of counters keeps, whatever the core count.
const MAX_STRIPES: usize = 64;

/// Hands each thread a ticket the first time it records a request; the ticket picks its stripe.
static NEXT_TICKET: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's ticket. Relaxed is enough: the ticket only needs to be some value of the counter,
    /// and the read-modify-write is atomic whatever the ordering, so threads get distinct tickets.
    static TICKET: usize = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
}

/// The default stripe count: twice the available parallelism, rounded up to a power of two (so a thread's
/// stripe is a mask of its ticket), at most 64. Computed once per process: asking the OS reads cgroup
/// files, too slow to repeat for every published ring.
pub fn default_stripes() -> usize {
    static STRIPES: OnceLock<usize> = OnceLock::new();
    *STRIPES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        (cores * 2).next_power_of_two().min(MAX_STRIPES)
    })
}

/// Request counters for the nodes of one placement, indexed like its [`nodes`](crate::Placement::nodes).
///
/// Recording is one relaxed atomic add on a cache line that only threads sharing this thread's stripe
/// write to. The counts are statistics: a read that races with recording may miss the latest requests,
/// and nothing else is published through them.
///
/// ```
/// use shardring::load::LoadCounters;
///
/// let counters = LoadCounters::new(3);
/// counters.record(0);
/// counters.record(0);
/// counters.add(2, 5);
/// assert_eq!(counters.counts(), vec![2, 0, 5]);
/// assert_eq!(counters.take(), vec![2, 0, 5]);
/// assert_eq!(counters.counts(), vec![0, 0, 0]);
/// ```
pub struct LoadCounters {
    /// `stripes` rows of `stride` counters; the first `nodes` of each row are used, the rest is padding.
    counts: Box<[AtomicU64]>,
    /// How many nodes are counted.
    nodes: usize,
    /// Counters from the start of one stripe to the start of the next.
    stride: usize,
    /// How many stripes; a power of two.
    stripes: usize,
}

impl fmt::Debug for LoadCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadCounters")
            .field("stripes", &self.stripes)
            .field("counts", &self.counts())
            .finish()
    }
}

impl LoadCounters {
    /// Zeroed counters for `nodes` nodes with [`default_stripes`] stripes.
    pub fn new(nodes: usize) -> LoadCounters {
        LoadCounters::with_stripes(nodes, default_stripes())
    }

    /// Zeroed counters for `nodes` nodes with `stripes` stripes (rounded up to a power of two, at least 1,
    /// at most 64). One stripe is a plain counter array, for single-threaded use.
    pub fn with_stripes(nodes: usize, stripes: usize) -> LoadCounters {
        let stripes = stripes.clamp(1, MAX_STRIPES).next_power_of_two();
        let stride = nodes.div_ceil(LINE_PAIR) * LINE_PAIR + LINE_PAIR;
        let counts = (0..stripes * stride).map(|_| AtomicU64::new(0)).collect();
        LoadCounters {
            counts,
            nodes,
            stride,
            stripes,
        }
    }

    /// How many nodes are counted.
    pub fn len(&self) -> usize {
        self.nodes
    }

    /// Whether no node is counted.
    pub fn is_empty(&self) -> bool {
        self.nodes == 0
    }

    /// How many stripes the counters have.
    pub fn stripes(&self) -> usize {
        self.stripes
    }

    /// Counts one request to node `index`. An index past the last node is ignored, so a stale index can
    /// never corrupt another node's count.
    #[inline]
    pub fn record(&self, index: usize) {
        self.add(index, 1);
    }

    /// Counts `n` requests to node `index`; see [`record`](LoadCounters::record).
    #[inline]
    pub fn add(&self, index: usize, n: u64) {
        if index >= self.nodes {
            return;
        }
        let stripe = TICKET.with(|t| *t) & (self.stripes - 1);
        // Relaxed: a statistic. The add itself is atomic, so no request is lost; no other data is
        // published through the counter, so no ordering with other memory is needed.
        self.counts[stripe * self.stride + index].fetch_add(n, Ordering::Relaxed);
    }

    /// Each node's count (summed over stripes), in node order.
    pub fn counts(&self) -> Vec<u64> {
        self.fold(|c| c.load(Ordering::Relaxed))
    }

    /// Each node's count, and zeroes them: the traffic since the previous `take` (a tumbling window).
    /// A request recorded concurrently is counted in exactly one window.
    pub fn take(&self) -> Vec<u64> {
        // swap is one atomic read-modify-write: a concurrent add lands either before it (and is
        // returned) or after it (and stays for the next window). Relaxed for the same reason as `add`.
        self.fold(|c| c.swap(0, Ordering::Relaxed))
    }

    /// Zeroes every count.
    pub fn reset(&self) {
        for c in self.counts.iter() {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// The statistics of the current counts.
    pub fn stats(&self) -> LoadStats {
        LoadStats::from_counts(&self.counts())
    }

    fn fold(&self, mut read: impl FnMut(&AtomicU64) -> u64) -> Vec<u64> {
        let mut out = vec![0u64; self.nodes];
        for stripe in 0..self.stripes {
            let row = &self.counts[stripe * self.stride..][..self.nodes];
            for (sum, c) in out.iter_mut().zip(row) {
                *sum = sum.wrapping_add(read(c));
            }
        }
        out
    }
}

/// How load is spread over nodes: each node's load, the mean and the extremes.
///
/// Loads are `f64` so that decayed loads ([`DecayingLoad`]) and plain counts share one type.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadStats {
    /// Each node's load, in node order.
    pub loads: Vec<f64>,
    /// The sum of the loads.
    pub total: f64,
    /// The mean load per node (0 when there are no nodes).
    pub mean: f64,
    /// The index of the most loaded node (the first on a tie), if there is a node.
    pub max_node: Option<usize>,
    /// The index of the least loaded node (the first on a tie), if there is a node.
    pub min_node: Option<usize>,
    /// Peak load over the mean: 1 is perfect balance. 1 when there is no load at all.
    pub peak_to_mean: f64,
    /// The largest deviation from the mean, relative to the mean: max |load − mean| / mean. This is what
    /// the [rebalancer](crate::rebalance) compares with its threshold; unlike peak/mean it also sees
    /// under-loaded nodes. 0 when there is no load at all.
    pub imbalance: f64,
}

impl LoadStats {
    /// Statistics of request counts.
    pub fn from_counts(counts: &[u64]) -> LoadStats {
        LoadStats::from_loads(counts.iter().map(|&c| c as f64).collect())
    }

    /// Statistics of loads (any non-negative measure).
    pub fn from_loads(loads: Vec<f64>) -> LoadStats {
        let total: f64 = loads.iter().sum();
        let mean = if loads.is_empty() {
            0.0
        } else {
            total / loads.len() as f64
        };
        let (mut max_node, mut min_node) = (None, None);
        for (i, &l) in loads.iter().enumerate() {
            match max_node {
                Some(m) if loads[m] >= l => {}
                _ => max_node = Some(i),
            }
            match min_node {
                Some(m) if loads[m] <= l => {}
                _ => min_node = Some(i),
            }
        }
        let (peak_to_mean, imbalance) = if mean > 0.0 {
            let peak = max_node.map_or(0.0, |i| loads[i]);
            let low = min_node.map_or(0.0, |i| loads[i]);
            (peak / mean, ((peak - mean).max(mean - low)) / mean)
        } else {
            (1.0, 0.0)
        };
        LoadStats {
            loads,
            total,
            mean,
            max_node,
            min_node,
            peak_to_mean,
            imbalance,
        }
    }

    /// Node `index`'s share of the total load (0 when there is no load).
    pub fn share(&self, index: usize) -> f64 {
        if self.total > 0.0 {
            self.loads.get(index).copied().unwrap_or(0.0) / self.total
        } else {
            0.0
        }
    }
}

/// An exponentially decaying view of recent traffic: each window of counts is added to the loads after
/// the older windows were multiplied by a decay factor, so old traffic fades instead of stopping dead.
///
/// ```
/// use shardring::load::DecayingLoad;
///
/// let mut recent = DecayingLoad::with_half_life(1.0); // each window counts half as much as the next
/// recent.observe(&[100, 0]);
/// recent.observe(&[0, 100]);
/// let stats = recent.stats();
/// assert_eq!(stats.loads, vec![50.0, 100.0]);
/// ```
#[derive(Debug, Clone)]
pub struct DecayingLoad {
    /// What the older loads are multiplied by when a window is observed, in (0, 1].
    keep: f64,
    /// The decayed loads, in node order.
    loads: Vec<f64>,
}

impl DecayingLoad {
    /// A view in which a window's weight halves after `half_life` further windows. A half life that is not
    /// a positive finite number means no decay (plain cumulative counts).
    pub fn with_half_life(half_life: f64) -> DecayingLoad {
        let keep = if half_life.is_finite() && half_life > 0.0 {
            0.5f64.powf(1.0 / half_life)
        } else {
            1.0
        };
        DecayingLoad {
            keep,
            loads: Vec::new(),
        }
    }

    /// Adds one window of counts (e.g. from [`LoadCounters::take`]). When the number of nodes changed,
    /// the old loads belong to other indices and are dropped.
    pub fn observe(&mut self, counts: &[u64]) {
        if self.loads.len() != counts.len() {
            self.loads = vec![0.0; counts.len()];
        }
        for (l, &c) in self.loads.iter_mut().zip(counts) {
            *l = *l * self.keep + c as f64;
        }
    }

    /// Forgets all traffic.
    pub fn reset(&mut self) {
        self.loads.iter_mut().for_each(|l| *l = 0.0);
    }

    /// The statistics of the decayed loads.
    pub fn stats(&self) -> LoadStats {
        LoadStats::from_loads(self.loads.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_are_powers_of_two_and_padded() {
        let c = LoadCounters::with_stripes(3, 3);
        assert_eq!(c.stripes(), 4);
        assert!(c.stride >= 3 + LINE_PAIR);
        assert_eq!(c.stride % LINE_PAIR, 0);
        c.record(7); // ignored: past the last node
        assert_eq!(c.counts(), vec![0, 0, 0]);
    }

    #[test]
    fn counts_from_many_threads_add_up() {
        let c = LoadCounters::new(4);
        std::thread::scope(|s| {
            for t in 0..4 {
                let c = &c;
                s.spawn(move || {
                    for i in 0..10_000 {
                        c.record((i + t) % 4);
                    }
                });
            }
        });
        assert_eq!(c.counts(), vec![10_000; 4]);
        c.reset();
        assert_eq!(c.counts(), vec![0; 4]);
    }

    #[test]
    fn stats_of_counts() {
        let s = LoadStats::from_counts(&[10, 30, 20]);
        assert_eq!(s.mean, 20.0);
        assert_eq!(s.max_node, Some(1));
        assert_eq!(s.min_node, Some(0));
        assert_eq!(s.peak_to_mean, 1.5);
        assert_eq!(s.imbalance, 0.5);
        assert!((s.share(1) - 0.5).abs() < 1e-12);
        let idle = LoadStats::from_counts(&[0, 0]);
        assert_eq!((idle.peak_to_mean, idle.imbalance), (1.0, 0.0));
        assert_eq!(LoadStats::from_counts(&[]).max_node, None);
    }

    #[test]
    fn decay_fades_old_windows() {
        let mut d = DecayingLoad::with_half_life(2.0);
        d.observe(&[100, 0]);
        d.observe(&[0, 0]);
        d.observe(&[0, 0]);
        assert!((d.stats().loads[0] - 50.0).abs() < 1e-9);
        d.observe(&[1, 2, 3]); // membership changed: start over
        assert_eq!(d.stats().loads, vec![1.0, 2.0, 3.0]);
    }
}
