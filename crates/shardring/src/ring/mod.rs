//! The consistent-hash ring: nodes own points on a 32-bit circle, a key belongs to the node of the first
//! point at or after the key's hash, wrapping past the top to the start.
//!
//! # Layout
//! All points live in one flat array sorted by position, 8 bytes each (position and node index), with an
//! optional index over the top bits of the position that turns the search into one
//! indexed load and a look at a few points. Those two loads are cache misses once the ring is larger
//! than the caches; [`Ring::lookup_many`] places a batch of keys so that their misses overlap. Beside
//! the index, rings built with [`RingBuilder::line_table`] keep a line table (`ring/lines.rs`) of one
//! 64-byte cache line per four index buckets that answers nearly every lookup from that line alone:
//! one cache miss instead of two that wait on each other.
//!
//! # Ties
//! Two points may land on the same position. They are ordered by node name (byte-wise), so the point of the
//! smaller name is found first. Placement therefore never depends on the order in which nodes were added.
//! The compatibility schemes order ties as their programs do instead (see [`PointScheme`]): twemproxy by
//! identity length then bytes; libmemcached, libketama and nginx by configuration order (the first
//! configured wins); uhashring by configuration order reversed (the last added wins). Configuration
//! order is the builder's order, then each [`add`](Ring::add) comes last.

mod batch;
mod build;
mod builder;
mod index;
mod lines;
mod migration;
mod prefetch;
mod replicas;
mod scheme;
pub mod template;

pub use self::builder::{RingBuilder, DEFAULT_MAX_POINTS, DEFAULT_VNODES};
pub use self::migration::Migration;
pub use self::replicas::Replicas;
pub use self::scheme::{PointScheme, SpymemcachedKeyFormat};
pub use self::template::{
    PointTemplate, TemplateDigest, TemplateRingBuilder, TemplateScheme, TieRule,
};

use std::num::NonZeroUsize;
use std::ops::Range;

use self::build::{BucketPlan, Collector, COLLECT_BATCH};
use self::index::{count_below, TopBitsIndex};
use self::lines::LineTable;
use self::scheme::SchemeInput;
use crate::hash::{HashFunction, KeyHash};
use crate::{Error, Node};

/// The fewest points a build splits between threads; below this, starting threads costs more than it
/// saves.
const PARALLEL_MIN_POINTS: u64 = 1 << 16;

/// One point of the circle: a position and the index of the node that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Point {
    /// The position on the 32-bit circle.
    pub(crate) position: u32,
    /// Index into [`Ring::nodes`].
    pub(crate) node: u32,
}

/// A consistent-hash ring with virtual nodes and weights.
///
/// Build one with [`Ring::builder`]; change membership with [`add`](Ring::add),
/// [`remove`](Ring::remove) and [`set_weight`](Ring::set_weight); find a key's node with
/// [`lookup`](Ring::lookup) and its distinct replicas with [`replicas`](Ring::replicas).
///
/// ```
/// use shardring::Ring;
///
/// let mut ring = Ring::builder()
///     .node("cache-a", 1.0)
///     .node("cache-b", 1.0)
///     .node("cache-c", 2.0)
///     .build()?;
/// let owner = ring.lookup("user:42").unwrap().name().to_string();
///
/// // Adding a node only moves keys to it.
/// ring.add("cache-d", 1.0)?;
/// let now = ring.lookup("user:42").unwrap().name();
/// assert!(now == owner || now == "cache-d");
///
/// // Replicas are distinct nodes, the first is the owner.
/// let replicas: Vec<_> = ring.replicas("user:42").take(3).map(|n| n.name()).collect();
/// assert_eq!(replicas[0], now);
/// assert_eq!(replicas.len(), 3);
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug)]
pub struct Ring {
    /// The members, in no meaningful order (removal swaps the last member into the hole).
    nodes: Vec<Node>,
    /// Every point, sorted by (position, owner's name).
    points: Vec<Point>,
    /// Narrows lookups to a bucket of `points`; rebuilt after every change.
    index: TopBitsIndex,
    /// Answers nearly every lookup from one cache line, when asked for ([`RingBuilder::line_table`]),
    /// the index is built and the nodes are few enough to be named in 16 bits; kept in step with
    /// `points` and `index`.
    lines: Option<LineTable>,
    /// Whether to keep `index` (it costs up to 4 bytes a point).
    use_index: bool,
    /// Whether to keep `lines` where it can be kept (see [`RingBuilder::line_table`]).
    use_lines: bool,
    /// Hashes keys, and (under [`PointScheme::Plain`]) node point names.
    hash: HashFunction,
    /// How nodes become points.
    scheme: PointScheme,
    /// Points per node of weight 1.
    vnodes: u32,
    /// The most points the ring may hold, a guard against memory growing with weight × vnodes.
    max_points: u64,
    /// How many threads a full build may use (`None`: one, the calling thread).
    build_threads: Option<NonZeroUsize>,
}

impl Clone for Ring {
    /// A copy with the same headroom in its point array, so that a copy-on-write change (clone, then
    /// add) does not reallocate the array it just copied.
    fn clone(&self) -> Ring {
        let mut points = Vec::with_capacity(self.points.capacity());
        points.extend_from_slice(&self.points);
        Ring {
            nodes: self.nodes.clone(),
            points,
            index: self.index.clone(),
            lines: self.lines.clone(),
            use_index: self.use_index,
            use_lines: self.use_lines,
            hash: self.hash,
            scheme: self.scheme,
            vnodes: self.vnodes,
            max_points: self.max_points,
            build_threads: self.build_threads,
        }
    }
}

impl Default for Ring {
    fn default() -> Ring {
        RingBuilder::new()
            .build()
            .expect("an empty default ring is always valid")
    }
}

impl Ring {
    /// A builder with the documented defaults (160 points per node of weight 1, xxh3, index on, built
    /// on the calling thread).
    pub fn builder() -> RingBuilder {
        RingBuilder::new()
    }

    /// An empty ring with the default settings.
    pub fn new() -> Ring {
        Ring::default()
    }

    fn scheme_input(&self) -> SchemeInput {
        SchemeInput {
            vnodes: self.vnodes,
            hash: self.hash,
            node_count: self.nodes.len(),
            total_weight: self.nodes.iter().map(Node::weight).sum(),
        }
    }

    /// The ring position of `key`: its hash, after whatever the point scheme does to keys (a hash tag,
    /// for example).
    #[inline]
    pub fn key_position(&self, key: impl AsRef<[u8]>) -> u32 {
        let key = key.as_ref();
        match self.scheme {
            // The library's own scheme hashes the key as it is, and the default hash (and CRC32, the
            // ketama world's) are called directly: the full hash dispatch (with the twemproxy
            // hashes) and the compatibility schemes' key rules are too big to inline, and a call
            // costs a visible share of a lookup.
            PointScheme::Plain => match self.hash {
                HashFunction::Xxh3 => crate::hash::xxh3_64(key) as u32,
                HashFunction::Crc32 => crate::hash::crc32(key),
                hash => hash.hash32(key),
            },
            scheme => scheme.key_position(self.hash, key),
        }
    }

    /// The node that owns `key`, or `None` when the ring is empty. Never allocates.
    #[inline]
    pub fn lookup(&self, key: impl AsRef<[u8]>) -> Option<&Node> {
        let node = self.locate_node(key.as_ref())?;
        Some(&self.nodes[node as usize])
    }

    /// The index into `nodes` of `key`'s owner; `None` if the ring is empty. From the line table when
    /// it has the answer, else as [`locate_point`](Ring::locate_point).
    #[inline]
    fn locate_node(&self, key: &[u8]) -> Option<u32> {
        match (self.scheme, self.hash) {
            (PointScheme::Plain, HashFunction::Xxh3) => {
                self.node_at(crate::hash::xxh3_64(key) as u32)
            }
            (PointScheme::Plain, HashFunction::Crc32) => self.node_at(crate::hash::crc32(key)),
            _ => self.locate_node_other(key),
        }
    }

    /// [`locate_node`](Ring::locate_node) for the other hashes and schemes: out of line, so that the
    /// inlined paths of the common two stay small.
    #[inline(never)]
    fn locate_node_other(&self, key: &[u8]) -> Option<u32> {
        self.node_at(self.key_position(key))
    }

    /// The index into `nodes` of the owner of ring position `hash`; `None` if the ring is empty.
    ///
    /// Two paths are inlined: a ring with a line table reads the hash's line, and the default ring (an
    /// index that is not crowded) reads the bucket's start, then counts its points below `hash`. The
    /// other cases (the few hashes a line cannot answer, a crowded index, no index, no points) are out
    /// of line.
    #[inline(always)]
    fn node_at(&self, hash: u32) -> Option<u32> {
        match &self.lines {
            Some(lines) => {
                if let Some(node) = lines.node(hash) {
                    return Some(node);
                }
            }
            None if self.index.counts() => {
                return Some(self.node_counted_from(self.index.bucket_start(hash), hash));
            }
            None => {}
        }
        self.node_at_other(hash)
    }

    /// The node of the first point at or after `hash`, counted from `start`, the first point of
    /// `hash`'s bucket (`index::count_below`), wrapping past the last point. The index must count
    /// ([`TopBitsIndex::counts`]). The default ring's single lookups and `lookup_many`'s last pass.
    #[inline(always)]
    fn node_counted_from(&self, start: usize, hash: u32) -> u32 {
        let found = count_below(&self.points, start, hash);
        self.points[self.wrap(found)].node
    }

    /// [`node_at`](Ring::node_at) on an empty ring, without an index, with a crowded one, or for a
    /// hash the line table does not answer: a search of the points. Marked cold so that the inlined
    /// paths lay their branch here out of the way; a ring without an index comes here for every
    /// lookup, and pays the call it paid before (its rows, `shardring-ring-bsearch`, did not move).
    #[cold]
    #[inline(never)]
    fn node_at_other(&self, hash: u32) -> Option<u32> {
        let i = self.point_at(hash)?;
        Some(self.points[i].node)
    }

    /// The index into `points` of the point that owns `key`; `None` if the ring is empty.
    #[inline]
    fn locate_point(&self, key: &[u8]) -> Option<usize> {
        match (self.scheme, self.hash) {
            (PointScheme::Plain, HashFunction::Xxh3) => {
                self.point_at(crate::hash::xxh3_64(key) as u32)
            }
            _ => self.locate_point_other(key),
        }
    }

    /// [`locate_point`](Ring::locate_point) for every hash but the default: out of line, so the
    /// default's path stays small enough to inline well.
    #[inline(never)]
    fn locate_point_other(&self, key: &[u8]) -> Option<usize> {
        self.point_at(self.key_position(key))
    }

    /// The node that owns ring position `hash` (a key already placed with [`Ring::key_position`]).
    #[inline]
    pub fn lookup_hash(&self, hash: u32) -> Option<&Node> {
        let node = self.node_at(hash)?;
        Some(&self.nodes[node as usize])
    }

    /// The index into `points` of the first point at or after `hash`, wrapping; `None` if empty.
    ///
    /// The search counts a bucket's points below the hash without a branch on their positions
    /// ([`TopBitsIndex::search_counting`]). A search that stops at the first point not below the hash
    /// ends on a branch the CPU cannot predict for keys it has not seen in that order, and its
    /// misprediction throws away the lookups already under way: over the bench crate's cold pool, and
    /// over cached keys arriving in a changing order, counting is much the faster. The branch wins only
    /// when the same keys come back in the same order, which a branch predictor learns (BENCHMARKS.md,
    /// "lookup-floors").
    #[inline]
    fn point_at(&self, hash: u32) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        Some(self.wrap(self.index.search_counting(&self.points, hash)))
    }

    /// A search's answer past the last point is the first point: the circle wraps.
    #[inline]
    fn wrap(&self, i: usize) -> usize {
        if i == self.points.len() {
            0
        } else {
            i
        }
    }

    /// The index into [`nodes`](Ring::nodes) of `key`'s owner, for callers that keep per-node arrays.
    #[inline]
    pub fn lookup_index(&self, key: impl AsRef<[u8]>) -> Option<usize> {
        let node = self.locate_node(key.as_ref())?;
        Some(node as usize)
    }

    /// Distinct nodes clockwise from `key`'s position; the first is [`lookup`](Ring::lookup)'s answer.
    ///
    /// The iterator ends after every node has been yielded once. Use `.take(n)` for `n` replicas.
    pub fn replicas(&self, key: impl AsRef<[u8]>) -> Replicas<'_> {
        let start = self.locate_point(key.as_ref());
        Replicas::new(self, start)
    }

    /// Adds a node of `weight` named `name`; only keys that now belong to it move.
    ///
    /// # Errors
    /// [`Error::EmptyName`], [`Error::InvalidWeight`], [`Error::DuplicateNode`], and
    /// [`Error::TooManyPoints`] when the ring would exceed its point limit. On error the ring is unchanged.
    pub fn add(&mut self, name: impl Into<String>, weight: f64) -> Result<(), Error> {
        self.add_node(Node::weighted(name, weight)?)
    }

    /// Adds `node`; see [`add`](Ring::add).
    ///
    /// # Errors
    /// As for [`add`](Ring::add).
    pub fn add_node(&mut self, mut node: Node) -> Result<(), Error> {
        // The new node comes last in configuration order (what the compatibility schemes break ties by).
        let last = self.nodes.iter().map(Node::rank).max();
        node.set_rank(last.map_or(0, |r| r.saturating_add(1)));
        if self.position_of(node.name()).is_some() {
            return Err(Error::DuplicateNode {
                node: node.name().to_string(),
            });
        }
        if self.nodes.len() >= u32::MAX as usize {
            return Err(Error::TooManyPoints {
                requested: self.nodes.len() as u64 + 1,
                limit: u32::MAX as u64,
            });
        }
        if self.scheme.is_global() {
            self.nodes.push(node);
            return self.rebuild().inspect_err(|_| {
                self.nodes.pop();
            });
        }
        let input = self.scheme_input();
        let count = self.scheme.point_count(&node, input);
        self.check_limit(self.points.len() as u64, count)?;

        let mut positions = Vec::with_capacity(count as usize);
        self.scheme.positions(&node, count, input, &mut positions);
        let index = self.nodes.len() as u32;
        self.nodes.push(node);
        let positions = self.merge_points(index, positions);
        if !self
            .index
            .inserted(&positions, index::bits_for(self.points.len()))
        {
            self.reindex();
            return Ok(());
        }
        let keeps = self.keeps_lines();
        match &mut self.lines {
            Some(lines) if keeps && lines.fits(&self.index) => {
                lines.inserted(&self.points, &self.index, &positions);
            }
            _ => self.rebuild_lines(),
        }
        Ok(())
    }

    /// Removes the node named `name` and returns it; only its keys move, each to its next owner clockwise.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] if there is no such node.
    pub fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let index = self.position_of(name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        if self.scheme.is_global() {
            let node = self.nodes.swap_remove(index);
            // Fewer points than before: the limit cannot be exceeded, so this cannot fail.
            if let Err(e) = self.rebuild() {
                self.nodes.push(node);
                let last = self.nodes.len() - 1;
                self.nodes.swap(index, last);
                return Err(e);
            }
            return Ok(node);
        }
        let removed = index as u32;
        let last = (self.nodes.len() - 1) as u32;
        // One pass drops the node's points (keeping their positions, in order, for the index) and
        // renumbers the last node's, as the last node takes the removed one's slot.
        let mut gone = Vec::new();
        self.points.retain_mut(|p| {
            if p.node == removed {
                gone.push(p.position);
                return false;
            }
            if p.node == last {
                p.node = removed;
            }
            true
        });
        let node = self.nodes.swap_remove(index);
        // The line table holds node indices, and the last node's changed: it is rebuilt (one pass, as
        // the pass above over the points).
        if self
            .index
            .removed(&gone, self.points.len(), index::bits_for(self.points.len()))
        {
            self.rebuild_lines();
        } else {
            self.reindex();
        }
        Ok(node)
    }

    /// Changes the weight of the node named `name`.
    ///
    /// Under [`PointScheme::Plain`] the node keeps the points it shares with its new count, so raising the
    /// weight only moves keys to the node and lowering it only moves keys away from it. Under the
    /// weighted compatibility schemes every node's points are recomputed, as the emulated program does.
    ///
    /// # Errors
    /// [`Error::UnknownNode`], [`Error::InvalidWeight`], [`Error::TooManyPoints`]; the ring is unchanged
    /// on error.
    pub fn set_weight(&mut self, name: &str, weight: f64) -> Result<(), Error> {
        let index = self.position_of(name).ok_or_else(|| Error::UnknownNode {
            node: name.to_string(),
        })?;
        let node = self.nodes[index].reweighted(weight)?;
        if self.scheme.is_global() {
            let old = std::mem::replace(&mut self.nodes[index], node);
            return self.rebuild().inspect_err(|_| {
                self.nodes[index] = old;
            });
        }
        let input = self.scheme_input();
        let count = self.scheme.point_count(&node, input);
        let others = self
            .points
            .iter()
            .filter(|p| p.node != index as u32)
            .count();
        self.check_limit(others as u64, count)?;

        // The node's old points go, and the index follows (or is dropped until the end): the merge
        // below looks points up through it.
        let mut gone = Vec::new();
        self.points.retain(|p| {
            let keep = p.node != index as u32;
            if !keep {
                gone.push(p.position);
            }
            keep
        });
        // (Bits are compared with the final count's: a mismatch drops the index, rebuilt below.)
        let others = self.points.len() as u64 + count;
        let index_bits = index::bits_for(others as usize);
        if !self.index.removed(&gone, self.points.len(), index_bits) {
            self.index = TopBitsIndex::default();
        }
        // The line table is stale from here until it is rebuilt below (in place, in its memory);
        // nothing between reads it.
        let mut positions = Vec::with_capacity(count as usize);
        self.scheme.positions(&node, count, input, &mut positions);
        self.nodes[index] = node;
        let positions = self.merge_points(index as u32, positions);
        if self
            .index
            .inserted(&positions, index::bits_for(self.points.len()))
        {
            self.rebuild_lines();
        } else {
            self.reindex();
        }
        Ok(())
    }

    fn check_limit(&self, existing: u64, added: u64) -> Result<(), Error> {
        let requested = existing.saturating_add(added);
        if requested > self.max_points {
            return Err(Error::TooManyPoints {
                requested,
                limit: self.max_points,
            });
        }
        Ok(())
    }

    fn position_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name() == name)
    }

    /// The total order of points: by position, then by the scheme's tie order of the owners (by name
    /// for the plain scheme).
    fn point_order(
        scheme: PointScheme,
        nodes: &[Node],
        a: &Point,
        b: &Point,
    ) -> std::cmp::Ordering {
        a.position
            .cmp(&b.position)
            .then_with(|| scheme.tie_order(&nodes[a.node as usize], &nodes[b.node as usize]))
    }

    /// Inserts one node's new positions into the sorted point array, in place: each old point moves
    /// once, by one `copy_within` per gap between new points. Returns the positions, sorted.
    fn merge_points(&mut self, node: u32, mut positions: Vec<u32>) -> Vec<u32> {
        debug_assert!(
            !self.index.is_built() || self.index.points_covered() == self.points.len(),
            "the index must be the points' own"
        );
        positions.sort_unstable();
        // Where each new point goes among the old ones: after every old point that orders before it
        // (smaller position, or the same position and an owner first in the tie order), found
        // through the index when there is one. Non-decreasing, as positions are.
        let at: Vec<usize> = positions
            .iter()
            .map(|&position| {
                let new = Point { position, node };
                let mut i = self.index.search(&self.points, position);
                while i < self.points.len()
                    && Ring::point_order(self.scheme, &self.nodes, &self.points[i], &new).is_lt()
                {
                    i += 1;
                }
                i
            })
            .collect();
        let old_len = self.points.len();
        // Builds leave 1/64 of headroom; when it is used up, grow by what is needed plus 1/64 again,
        // never by doubling: memory stays close to 8 bytes a point however the ring was grown.
        if self.points.capacity() < old_len + positions.len() {
            self.points.reserve_exact(positions.len().max(old_len / 64));
        }
        self.points.resize(
            old_len + positions.len(),
            Point {
                position: 0,
                node: 0,
            },
        );
        // From the back: the old points from `at[j]` to the previous gap move up by `j + 1`.
        let mut end = old_len;
        for (j, (&i, &position)) in at.iter().zip(&positions).enumerate().rev() {
            self.points.copy_within(i..end, i + j + 1);
            self.points[i + j] = Point { position, node };
            end = i;
        }
        positions
    }

    /// Rebuilds every point from `nodes` (builders, and membership changes under schemes whose points
    /// depend on all nodes). On error the points are unchanged.
    pub(crate) fn rebuild(&mut self) -> Result<(), Error> {
        let input = self.scheme_input();
        let counts: Vec<u64> = self
            .nodes
            .iter()
            .map(|n| self.scheme.point_count(n, input))
            .collect();
        let total = counts.iter().fold(0u64, |a, &c| a.saturating_add(c));
        self.check_limit(0, total)?;
        // Points are generated node by node in the scheme's tie order, and the sort is stable: points
        // at the same position end up in that order, as `point_order` wants, without comparing nodes.
        let mut by_name: Vec<u32> = (0..self.nodes.len() as u32).collect();
        by_name.sort_unstable_by(|&a, &b| {
            self.scheme
                .tie_order(&self.nodes[a as usize], &self.nodes[b as usize])
        });
        let plan = BucketPlan::new(total as usize, self.build_threads_for(total));
        let shares = plan.shares(by_name.iter().map(|&node| counts[node as usize]));
        let collect = |ranks: Range<usize>, collector: &mut Collector| {
            // Positions are handed over a batch at a time: the batch's length stays in a register,
            // where a collector's would be stored and loaded again for every position.
            let mut batch = [0u32; COLLECT_BATCH];
            for rank in ranks {
                let node = by_name[rank] as usize;
                collector.begin_node(rank as u32);
                let mut batched = 0;
                self.scheme
                    .for_each_position(&self.nodes[node], counts[node], input, |position| {
                        batch[batched] = position;
                        batched += 1;
                        if batched == COLLECT_BATCH {
                            collector.extend(&batch);
                            batched = 0;
                        }
                    });
                collector.extend(&batch[..batched]);
            }
        };
        (self.points, self.index) = plan.build(shares, collect, &by_name, self.use_index);
        // The counting sort leaves the index of its own buckets (one per point or so, from the points
        // the plan expected); were the plan's count off, the index is rebuilt at the right size.
        let bits = index::bits_for(self.points.len());
        if self.index.is_built() && self.index.bits() != bits {
            self.index = TopBitsIndex::build(&self.points, bits);
        }
        self.rebuild_lines();
        Ok(())
    }

    /// Whether the ring, as it is, keeps a line table: asked for, over a built index, with points,
    /// and within [`lines::MAX_NODES`] and [`lines::MAX_POINTS`].
    fn keeps_lines(&self) -> bool {
        self.use_lines
            && self.index.is_built()
            && !self.points.is_empty()
            && self.nodes.len() <= lines::MAX_NODES
            && self.points.len() <= lines::MAX_POINTS
    }

    /// Builds the line table (or drops it) for the points and index as they are.
    fn rebuild_lines(&mut self) {
        if !self.keeps_lines() {
            self.lines = None;
            return;
        }
        match &mut self.lines {
            Some(lines) => lines.rebuild(&self.points, &self.index),
            None => self.lines = Some(LineTable::build(&self.points, &self.index)),
        }
    }

    /// How many threads build `total` points: one below [`PARALLEL_MIN_POINTS`], else the setting
    /// (by default one), with at least half that many points each.
    fn build_threads_for(&self, total: u64) -> usize {
        #[cfg(test)]
        if let Some(threads) = tests::FORCE_BUILD_THREADS.get() {
            return threads;
        }
        if total < PARALLEL_MIN_POINTS {
            return 1;
        }
        let wanted = self.build_threads.map_or(1, NonZeroUsize::get);
        wanted
            .min((total / (PARALLEL_MIN_POINTS / 2)) as usize)
            .max(1)
    }

    fn reindex(&mut self) {
        self.index = if self.use_index {
            TopBitsIndex::build(&self.points, index::bits_for(self.points.len()))
        } else {
            TopBitsIndex::default()
        };
        self.rebuild_lines();
    }

    /// The members, in unspecified order; [`lookup_index`](Ring::lookup_index) indexes this slice.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The member named `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name() == name)
    }

    /// How many nodes are members.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the ring has no nodes (every lookup returns `None`).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many points are on the circle.
    pub fn point_count(&self) -> usize {
        self.points.len()
    }

    /// Every point in ring order: `(position, owner)`.
    pub fn points(&self) -> impl ExactSizeIterator<Item = (u32, &Node)> + '_ {
        self.points
            .iter()
            .map(|p| (p.position, &self.nodes[p.node as usize]))
    }

    /// The positions of the node named `name`, in ring order (empty if there is no such node).
    pub fn node_points<'a>(&'a self, name: &'a str) -> impl Iterator<Item = u32> + 'a {
        let index = self.position_of(name).map(|i| i as u32);
        self.points
            .iter()
            .filter(move |p| Some(p.node) == index)
            .map(|p| p.position)
    }

    /// How many points each node has, in [`nodes`](Ring::nodes) order.
    pub fn point_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.nodes.len()];
        for p in &self.points {
            counts[p.node as usize] += 1;
        }
        counts
    }

    /// Each node's share of the circle (the fraction of all hash values it owns), in
    /// [`nodes`](Ring::nodes) order. The shares sum to 1 on a non-empty ring.
    pub fn shares(&self) -> Vec<(&Node, f64)> {
        let mut owned = vec![0u64; self.nodes.len()];
        for (i, p) in self.points.iter().enumerate() {
            // A point owns the arc from its predecessor (exclusive) up to itself (inclusive).
            let prev = if i == 0 {
                self.points[self.points.len() - 1].position
            } else {
                self.points[i - 1].position
            };
            let arc = if self.points.len() == 1 {
                1u64 << 32
            } else {
                u64::from(p.position.wrapping_sub(prev))
            };
            owned[p.node as usize] += arc;
        }
        self.nodes
            .iter()
            .zip(owned)
            .map(|(n, arc)| (n, arc as f64 / (1u64 << 32) as f64))
            .collect()
    }

    /// The key hash.
    pub fn hash_function(&self) -> HashFunction {
        self.hash
    }

    /// The point scheme.
    pub fn point_scheme(&self) -> PointScheme {
        self.scheme
    }

    /// Points per node of weight 1.
    pub fn vnodes(&self) -> u32 {
        self.vnodes
    }

    /// Heap bytes held by the point array, the index and the line table (node names not counted). The
    /// point array keeps about 1/64 of headroom so that adding a node does not reallocate it.
    pub fn memory_bytes(&self) -> usize {
        self.points.capacity() * std::mem::size_of::<Point>()
            + self.index.memory_bytes()
            + self.lines.as_ref().map_or(0, LineTable::memory_bytes)
    }

    /// Whether lookups use the top-bits index.
    pub fn has_lookup_index(&self) -> bool {
        self.index.is_built()
    }

    /// Whether lookups use a line table ([`RingBuilder::line_table`]; it is only kept where it can
    /// be: see there).
    pub fn has_line_table(&self) -> bool {
        self.lines.is_some()
    }

    /// Keeps a line table from now on, or drops it: [`RingBuilder::line_table`] for a ring already
    /// built, such as one the compatibility builders made (they take no such setting). Placement
    /// does not change.
    ///
    /// ```
    /// use shardring::compat::twemproxy::{ketama_ring, TwemproxyServer};
    /// use shardring::hash::TwemproxyHash;
    ///
    /// let servers: Vec<TwemproxyServer> = ["10.0.0.1:11211:1", "10.0.0.2:11211:1"]
    ///     .iter()
    ///     .map(|s| s.parse())
    ///     .collect::<Result<_, _>>()?;
    /// let mut ring = ketama_ring(&servers, TwemproxyHash::Fnv1a64, None)?;
    /// let before = ring.lookup("user:1").map(|n| n.name().to_string());
    /// ring.set_line_table(true);
    /// assert!(ring.has_line_table());
    /// assert_eq!(ring.lookup("user:1").map(|n| n.name().to_string()), before);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_line_table(&mut self, yes: bool) {
        self.use_lines = yes;
        self.rebuild_lines();
    }

    /// The hash ranges whose owner differs between `self` and `to`: the migration plan from this ring to
    /// that one. Both rings should hash keys alike; the plan compares positions only.
    pub fn migration_to(&self, to: &Ring) -> Vec<Migration> {
        migration::plan(self, to)
    }
}

#[cfg(test)]
mod tests;
