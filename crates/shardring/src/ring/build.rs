//! Building a ring's points: every node's positions, sorted, with the lookup index left behind; on
//! several threads for large rings.
//!
//! # The sort
//! A counting sort by the index's own buckets (the top [`bits_for`] bits of a position). Positions
//! are collected as `u32`s (4 bytes a point), node after node in the scheme's tie order ([`Collector`]);
//! they are counted by bucket; the running sums of the counts give each bucket's end; and one scatter
//! from the last point back to the first moves every point into its bucket, counting each bucket's end
//! down to its start, so that the counts become exactly the index's `starts`. A last pass sorts within
//! buckets, of about one point each and rarely more than three ([`sort_within_buckets`]). Every step is
//! stable: points at the same position keep the order they were collected in, the tie order.
//!
//! The counts take 4 bytes a bucket, at most 4 bytes a point (512 KiB for 160,000 points, within a
//! core's L2 cache). Without an index (`lookup_index(false)`) they are dropped after the build.
//!
//! # Threads
//! A build on `n` threads ([`RingBuilder::build_threads`](super::RingBuilder::build_threads)) cuts the
//! buckets into `n` equal ranges, and has two steps:
//! 1. hashing: the nodes are cut into `4n` shares, consecutive in tie order and with about as many
//!    points each; a thread collects the positions of a share, keeping apart those of each range;
//! 2. sorting: a thread counts, scatters and sorts one range, reading that range's positions from
//!    every share in tie order, into the range's own part of the point array and of the index.
//!
//! Only the time depends on `n`: the points and the index are the same, bit for bit, whatever the number
//! of threads. The threads are started once per build (`std::thread::scope`), the calling thread among
//! them, and each takes the next share, then the next range, until none is left, so that a thread that
//! starts late finds less to do, down to nothing. A thread interrupted while it holds a share or a range
//! still makes the others wait for it: when every core is busy with other work, a build on one thread
//! can be the faster. Collected shares travel through a channel; the ranges wait in a locked list.
//! Nothing here is `unsafe`: the ranges' parts are disjoint slices.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};

use super::index::{bits_for, TopBitsIndex, SCAN};
use super::Point;

/// How many shares of the nodes each thread hashes, on average, in a build on several threads:
/// more, smaller shares even out threads that start late or are interrupted.
const SHARES_PER_THREAD: usize = 4;

/// The most positions given to [`Collector::extend`] at once.
pub(crate) const COLLECT_BATCH: usize = 64;

/// How the points of one build are bucketed and split between threads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BucketPlan {
    /// How many points are built.
    len: usize,
    /// How many top bits of a position make its bucket.
    bits: u32,
    /// How many ranges the buckets are cut into: one per thread.
    ranges: usize,
}

/// A thread's share of the nodes in the first step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Share {
    /// The nodes' ranks in tie order.
    pub(crate) ranks: Range<usize>,
    /// How many points they have.
    pub(crate) points: usize,
}

/// A thread's part of the output in the second step.
#[derive(Debug)]
struct Part<'a> {
    /// The range of buckets.
    range: usize,
    /// The index in the ring of the range's first point.
    offset: usize,
    /// The range's points.
    points: &'a mut [Point],
    /// The range's buckets' starts.
    starts: &'a mut [u32],
}

impl BucketPlan {
    /// The plan for `len` points on `threads` threads (at least one).
    pub(crate) fn new(len: usize, threads: usize) -> BucketPlan {
        let bits = bits_for(len);
        BucketPlan {
            len,
            bits,
            ranges: threads.clamp(1, 1 << bits),
        }
    }

    /// The bucket of `position`.
    #[inline(always)]
    fn bucket(self, position: u32) -> usize {
        (position >> (32 - self.bits)) as usize
    }

    /// The range of `bucket`: the ranges cut the buckets evenly.
    #[inline(always)]
    fn range(self, bucket: usize) -> usize {
        ((bucket as u64 * self.ranges as u64) >> self.bits) as usize
    }

    /// The first bucket of range `range` (`range == ranges` gives the end of the last).
    fn first_bucket(self, range: usize) -> usize {
        ((range as u64) << self.bits).div_ceil(self.ranges as u64) as usize
    }

    /// The nodes cut into shares, consecutive and with about as many points each (one on one
    /// thread, [`SHARES_PER_THREAD`] a thread on several); `counts` are the nodes' point counts in
    /// tie order.
    pub(crate) fn shares(self, counts: impl ExactSizeIterator<Item = u64>) -> Vec<Share> {
        let wanted = if self.ranges == 1 {
            1
        } else {
            self.ranges * SHARES_PER_THREAD
        };
        let nodes = counts.len();
        let total = self.len as u64;
        let mut shares = Vec::with_capacity(wanted);
        let (mut from, mut before, mut upto) = (0usize, 0u64, 0u64);
        for (rank, count) in counts.enumerate() {
            upto += count;
            while shares.len() + 1 < wanted
                && upto * wanted as u64 >= total * (shares.len() as u64 + 1)
            {
                shares.push(Share {
                    ranks: from..rank + 1,
                    points: (upto - before) as usize,
                });
                (from, before) = (rank + 1, upto);
            }
        }
        shares.push(Share {
            ranks: from..nodes,
            points: (upto - before) as usize,
        });
        shares.resize(
            wanted,
            Share {
                ranks: nodes..nodes,
                points: 0,
            },
        );
        shares
    }

    /// Builds the sorted points and their index (an empty one unless `index`): `collect` collects
    /// the positions of a share of the nodes, and each share's is collected by a thread of its own.
    /// Nodes are pushed by rank, their place in tie order; `nodes[rank]` is the node.
    pub(crate) fn build<F>(
        self,
        shares: Vec<Share>,
        collect: F,
        nodes: &[u32],
        index: bool,
    ) -> (Vec<Point>, TopBitsIndex)
    where
        F: Fn(Range<usize>, &mut Collector) + Sync,
    {
        let collect = |share: Share| {
            let mut collector = self.collector(share.points);
            collect(share.ranks, &mut collector);
            collector
        };
        if self.len == 0 {
            return (Vec::new(), TopBitsIndex::default());
        }
        // Room for 1/64 more points: adding a few nodes later does not reallocate (and copy) the array.
        let mut sorted = Vec::with_capacity(self.len + self.len / 64);
        sorted.resize(
            self.len,
            Point {
                position: 0,
                node: 0,
            },
        );
        let mut starts = vec![0u32; (1usize << self.bits) + 1];
        starts[1usize << self.bits] = self.len as u32;
        let (all_points, all_starts) = (&mut sorted[..], &mut starts[..]);
        let crowded = if self.ranges == 1 {
            let collected = shares.into_iter().map(collect).collect::<Vec<_>>();
            let mut parts = self.parts(&collected, all_points, all_starts);
            let part = parts.pop().expect("one part");
            self.sort_range(&collected, part, nodes)
        } else {
            self.on_threads(shares, &collect, nodes, all_points, all_starts)
        };
        let index = if index {
            TopBitsIndex::from_starts(32 - self.bits, starts, crowded)
        } else {
            TopBitsIndex::default()
        };
        (sorted, index)
    }

    /// Collects the shares and sorts the ranges on `ranges` threads, this one among them. Shares
    /// and ranges go to whichever thread is free: a thread that starts late (the machine is busy)
    /// finds less to do, down to nothing. Returns whether a bucket is crowded.
    fn on_threads(
        self,
        shares: Vec<Share>,
        collect: &(impl Fn(Share) -> Collector + Sync),
        nodes: &[u32],
        all_points: &mut [Point],
        all_starts: &mut [u32],
    ) -> bool {
        // The index of the next share to collect. Relaxed: the counter only hands out indices; the
        // collectors travel through a channel, which orders their writes before their reads.
        let next = AtomicUsize::new(0);
        let claim = || {
            let i = next.fetch_add(1, Ordering::Relaxed);
            shares.get(i).map(|share| (i, share.clone()))
        };
        // The collectors, read by every thread in the second step.
        let collected: OnceLock<Vec<Collector>> = OnceLock::new();
        // The ranges' parts, taken by whichever thread is free; never locked while waiting.
        let parts: Mutex<Vec<Part<'_>>> = Mutex::new(Vec::new());
        let sort_parts = || {
            let mut crowded = false;
            loop {
                let part = parts.lock().expect("a build thread panicked").pop();
                let Some(part) = part else {
                    return crowded;
                };
                let collected = collected.get().expect("collected before any part is out");
                crowded |= self.sort_range(collected, part, nodes);
            }
        };
        std::thread::scope(|s| {
            let (send_collector, collectors) = mpsc::channel();
            let helpers: Vec<_> = (1..self.ranges)
                .map(|_| {
                    let send_collector = send_collector.clone();
                    // Says that the parts are out (or, if it is dropped, that there will be none).
                    let (go, wait) = mpsc::sync_channel::<()>(1);
                    let (claim, sort_parts) = (&claim, &sort_parts);
                    let thread = s.spawn(move || {
                        while let Some((i, share)) = claim() {
                            if send_collector.send((i, collect(share))).is_err() {
                                return false;
                            }
                        }
                        // Gone before waiting for parts: should another thread panic, this one's
                        // collectors cannot be awaited for ever.
                        drop(send_collector);
                        match wait.recv() {
                            Ok(()) => sort_parts(),
                            Err(_) => false,
                        }
                    });
                    (go, thread)
                })
                .collect();
            drop(send_collector);
            let mut all: Vec<Option<Collector>> = (0..shares.len()).map(|_| None).collect();
            let mut missing = shares.len();
            while let Some((i, share)) = claim() {
                all[i] = Some(collect(share));
                missing -= 1;
            }
            for _ in 0..missing {
                let (i, collector) = collectors.recv().expect("a build thread panicked");
                all[i] = Some(collector);
            }
            let collected = collected.get_or_init(|| {
                all.into_iter()
                    .map(|c| c.expect("every share collected"))
                    .collect()
            });
            let mut out = self.parts(collected, all_points, all_starts);
            // Taken from the back: the first range last.
            out.reverse();
            *parts.lock().expect("no build thread panicked") = out;
            for (go, _) in &helpers {
                // A thread that stopped early (it cannot have: its collectors are all in) needs no go.
                let _ = go.send(());
            }
            let mut crowded = sort_parts();
            for (_, thread) in helpers {
                crowded |= thread.join().expect("a build thread panicked");
            }
            crowded
        })
    }

    /// Each range's part of the point array and of the bucket starts, in order.
    fn parts<'a>(
        self,
        collected: &[Collector],
        mut points: &'a mut [Point],
        mut starts: &'a mut [u32],
    ) -> Vec<Part<'a>> {
        let mut parts = Vec::with_capacity(self.ranges);
        let mut offset = 0usize;
        for range in 0..self.ranges {
            let len: usize = collected.iter().map(|c| c.range(range).len()).sum();
            let buckets = self.first_bucket(range + 1) - self.first_bucket(range);
            let (part_points, rest_points) = points.split_at_mut(len);
            let (part_starts, rest_starts) = starts.split_at_mut(buckets);
            (points, starts) = (rest_points, rest_starts);
            parts.push(Part {
                range,
                offset,
                points: part_points,
                starts: part_starts,
            });
            offset += len;
        }
        parts
    }

    /// Sorts one range of buckets: counts its positions, scatters them into `part`, sorts within
    /// buckets, and leaves the buckets' starts. Returns whether a bucket is crowded.
    fn sort_range(self, collected: &[Collector], part: Part<'_>, nodes: &[u32]) -> bool {
        let Part {
            range,
            offset,
            points,
            starts,
        } = part;
        let first = self.first_bucket(range);
        for collector in collected {
            for &position in collector.range(range) {
                starts[self.bucket(position) - first] += 1;
            }
        }
        // Each bucket's end (as an index into the ring), and whether some bucket is crowded.
        let mut sum = offset as u32;
        let mut most = 0u32;
        for s in starts.iter_mut() {
            most = most.max(*s);
            sum += *s;
            *s = sum;
        }
        // From the last point back: each bucket fills from its end, and its end counts down to its
        // start. Points hold their node's rank rather than the node until they are in order.
        for collector in collected.iter().rev() {
            let positions = collector.range(range);
            let mut end = positions.len();
            for &(rank, from) in collector.runs[range].iter().rev() {
                for &position in positions[from as usize..end].iter().rev() {
                    let slot = &mut starts[self.bucket(position) - first];
                    *slot -= 1;
                    points[*slot as usize - offset] = Point {
                        position,
                        node: rank,
                    };
                }
                end = from as usize;
            }
        }
        let crowded = most as usize > SCAN;
        if crowded {
            // Should positions crowd together (they do not for any hash we ship), let the library
            // sort the crowded buckets.
            for (k, &start) in starts.iter().enumerate() {
                let end = starts
                    .get(k + 1)
                    .map_or(points.len(), |&e| e as usize - offset);
                points[start as usize - offset..end].sort_by_key(|p| p.position);
            }
            for p in points.iter_mut() {
                p.node = nodes[p.node as usize];
            }
        } else {
            sort_within_buckets(points, nodes);
        }
        crowded
    }

    /// A collector for a share of `len` points.
    fn collector(self, len: usize) -> Collector {
        let (positions, regions) = if self.ranges == 1 {
            (Vec::with_capacity(len), vec![0, 0])
        } else {
            // Hashes spread points evenly over the ranges: each region has room for its share, a
            // sixteenth more, and two batches.
            let room = len / self.ranges + len / 16 + 2 * COLLECT_BATCH;
            let regions = (0..=self.ranges).map(|r| r * room).collect();
            (vec![0u32; self.ranges * room], regions)
        };
        Collector {
            plan: self,
            positions,
            regions,
            lens: vec![0; self.ranges],
            runs: vec![Vec::new(); self.ranges],
        }
    }
}

/// The positions of consecutive nodes, in push order, kept apart by range of buckets: what one
/// thread hashes.
///
/// Positions come in batches ([`extend`](Collector::extend)): with one range they are appended to a
/// vector; with several, each range's are moved to its region of one vector by a pass over the batch
/// that writes every position and advances only over those of the range. (Pushing each position
/// onto its range's own vector would make every push wait for the last one to that vector to store
/// its length.)
#[derive(Debug)]
pub(crate) struct Collector {
    /// The buckets and their ranges.
    plan: BucketPlan,
    /// The positions pushed, each range's in a region of its own, with room for a batch after it.
    positions: Vec<u32>,
    /// Per range, where its region starts in `positions`, and where the last one ends.
    regions: Vec<usize>,
    /// Per range, how many positions it holds.
    lens: Vec<usize>,
    /// Per range, `(rank, index of its first position in the range)` of each node, in push order.
    runs: Vec<Vec<(u32, u32)>>,
}

impl Collector {
    /// Starts the points of the node of rank `rank` (its place in push order, counted over every
    /// collector): the positions pushed from now on are its.
    pub(crate) fn begin_node(&mut self, rank: u32) {
        for (runs, &len) in self.runs.iter_mut().zip(&self.lens) {
            runs.push((rank, len as u32));
        }
    }

    /// Adds points of the current node: at most [`COLLECT_BATCH`] at a time.
    pub(crate) fn extend(&mut self, batch: &[u32]) {
        let plan = self.plan;
        if plan.ranges == 1 {
            self.positions.extend_from_slice(batch);
            self.lens[0] = self.positions.len();
            return;
        }
        debug_assert!(batch.len() <= COLLECT_BATCH);
        for range in 0..plan.ranges {
            if self.regions[range] + self.lens[range] + COLLECT_BATCH > self.regions[range + 1] {
                self.grow();
            }
            let start = self.regions[range];
            let mut len = self.lens[range];
            let region = &mut self.positions[start..start + len + COLLECT_BATCH];
            for &position in batch {
                region[len] = position;
                len += usize::from(plan.range(plan.bucket(position)) == range);
            }
            self.lens[range] = len;
        }
    }

    /// Doubles every region, for a range without room for a batch (hashes spread points evenly over
    /// the ranges, so this is rare).
    #[cold]
    fn grow(&mut self) {
        let mut regions = Vec::with_capacity(self.regions.len());
        let mut positions = Vec::new();
        for r in 0..self.plan.ranges {
            regions.push(positions.len());
            let held = self.regions[r]..self.regions[r] + self.lens[r];
            positions.extend_from_slice(&self.positions[held]);
            let room = 2 * (self.regions[r + 1] - self.regions[r]);
            positions.resize(regions[r] + room, 0);
        }
        regions.push(positions.len());
        (self.positions, self.regions) = (positions, regions);
    }

    /// The positions of range `range`.
    fn range(&self, range: usize) -> &[u32] {
        let start = self.regions[range];
        &self.positions[start..start + self.lens[range]]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A pseudo-random sequence (an LCG): the same on every run.
    fn numbers(seed: u32) -> impl FnMut() -> u32 {
        let mut state = seed;
        move || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        }
    }

    /// Sorts `positions` as a build of `threads` threads would: node `i` (ranked `i`) has the
    /// `i`th `per_node` positions, and they are pushed in batches of `batch`.
    fn build(
        positions: &[u32],
        per_node: usize,
        threads: usize,
        batch: usize,
    ) -> (Vec<Point>, TopBitsIndex) {
        let plan = BucketPlan::new(positions.len(), threads);
        let nodes = positions.chunks(per_node).collect::<Vec<_>>();
        let shares = plan.shares(nodes.iter().map(|n| n.len() as u64));
        let collect = |ranks: Range<usize>, collector: &mut Collector| {
            for rank in ranks {
                collector.begin_node(rank as u32);
                for chunk in nodes[rank].chunks(batch) {
                    collector.extend(chunk);
                }
            }
        };
        // Nodes numbered apart from ranks, to see that ranks are mapped back.
        let by_rank: Vec<u32> = (0..nodes.len() as u32).map(|r| r ^ 5).collect();
        let (mut points, index) = plan.build(shares, collect, &by_rank, true);
        for p in &mut points {
            p.node ^= 5;
        }
        (points, index)
    }

    /// What the build must give: positions sorted, ties in push order.
    fn expected(positions: &[u32], per_node: usize) -> Vec<Point> {
        let mut points: Vec<Point> = positions
            .iter()
            .enumerate()
            .map(|(i, &position)| Point {
                position,
                node: (i / per_node) as u32,
            })
            .collect();
        points.sort_by_key(|p| p.position);
        points
    }

    #[test]
    fn sorts_stably_and_indexes_like_build_on_any_number_of_threads() {
        let mut next = numbers(11);
        // Positions that repeat up to three times, in shuffled order, in buckets of a few points.
        let mut spread = Vec::new();
        for _ in 0..3000 {
            let position = next();
            for _ in 0..=next() % 3 {
                spread.push(position);
            }
        }
        for i in (1..spread.len()).rev() {
            spread.swap(i, next() as usize % (i + 1));
        }
        // And a crowd in one bucket, at both ends of the circle.
        let mut crowded = spread[..5000].to_vec();
        crowded.extend([5, 5, 5, u32::MAX, u32::MAX, 0]);
        crowded.extend((0..3000).map(|i| 0x8000_0000 + (3000 - i)));
        for (positions, crowd) in [(&spread, false), (&crowded, true)] {
            for (len, per_node) in [
                (0, 1),
                (1, 1),
                (2, 1),
                (3, 2),
                (100, 7),
                (positions.len(), 1),
            ] {
                let positions = &positions[..len];
                let want = expected(positions, per_node);
                let mut serial = None;
                for threads in [1, 2, 3, 4, 7] {
                    let (points, index) = build(positions, per_node, threads, COLLECT_BATCH);
                    assert_eq!(points, want, "{len} points on {threads} threads");
                    assert_eq!(
                        index.starts_for_tests(),
                        TopBitsIndex::build(&points, bits_for(points.len())).starts_for_tests()
                    );
                    if len == positions.len() && len > 100 {
                        assert_eq!(index.is_crowded(), crowd);
                    }
                    let index = index.starts_for_tests();
                    assert_eq!(*serial.get_or_insert(index.clone()), index);
                }
            }
        }
    }

    #[test]
    fn ranges_that_outgrow_their_regions_grow() {
        // Every position in the last range: its region fills up while the others stay empty.
        let mut next = numbers(3);
        let positions: Vec<u32> = (0..5000).map(|_| 0xF000_0000 | (next() >> 4)).collect();
        for per_node in [1, 160, 5000] {
            let want = expected(&positions, per_node);
            for threads in [2, 4] {
                for batch in [1, 7, COLLECT_BATCH] {
                    assert_eq!(build(&positions, per_node, threads, batch).0, want);
                }
            }
        }
    }

    #[test]
    fn shares_cut_nodes_in_order_with_about_as_many_points_each() {
        let counts = [160u64, 160, 10, 500, 0, 160, 160, 1, 1, 40];
        let total: u64 = counts.iter().sum();
        for threads in 1..=12 {
            let plan = BucketPlan::new(total as usize, threads);
            let shares = plan.shares(counts.iter().copied());
            let wanted = if threads == 1 {
                1
            } else {
                threads * SHARES_PER_THREAD
            };
            assert_eq!(shares.len(), wanted);
            let mut next = 0;
            for share in &shares {
                assert_eq!(share.ranks.start, next);
                next = share.ranks.end;
                let points: u64 = counts[share.ranks.clone()].iter().sum();
                assert_eq!(share.points as u64, points);
            }
            assert_eq!(next, counts.len());
        }
        // Even shares of even nodes.
        let plan = BucketPlan::new(1000 * 160, 2);
        let shares = plan.shares(std::iter::repeat_n(160, 1000));
        assert!(shares.iter().all(|s| s.ranks.len() == 125), "{shares:?}");
    }

    #[test]
    fn ranges_cut_the_buckets_in_order() {
        for (len, threads) in [(1, 1), (2, 2), (100, 3), (160_000, 2), (160_000, 7)] {
            let plan = BucketPlan::new(len, threads);
            assert_eq!(plan.first_bucket(0), 0);
            assert_eq!(plan.first_bucket(plan.ranges), 1 << plan.bits);
            for bucket in 0..1usize << plan.bits {
                let range = plan.range(bucket);
                assert!(
                    plan.first_bucket(range) <= bucket && bucket < plan.first_bucket(range + 1)
                );
            }
        }
    }
}
