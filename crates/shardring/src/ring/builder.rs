//! The ring's builder: every setting with its default.

use std::num::NonZeroUsize;

use super::{PointScheme, Ring, TopBitsIndex};
use crate::hash::HashFunction;
use crate::{Error, Node};

/// The default number of points per node of weight 1.
pub const DEFAULT_VNODES: u32 = 160;

/// The default limit on points in one ring: 2^26 (64 Mi points, 512 MiB of point array).
pub const DEFAULT_MAX_POINTS: u64 = 1 << 26;

/// Builds a [`Ring`].
///
/// ```
/// use shardring::{HashFunction, Ring};
///
/// let ring = Ring::builder()
///     .vnodes(100)
///     .hash(HashFunction::Murmur3)
///     .nodes(["a", "b", "c"])
///     .node("d", 2.0)
///     .build()?;
/// assert_eq!(ring.point_count(), 500);
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RingBuilder {
    /// Points per node of weight 1.
    vnodes: u32,
    /// The key hash.
    hash: HashFunction,
    /// How nodes become points.
    scheme: PointScheme,
    /// The point limit.
    max_points: u64,
    /// Whether to build the lookup index.
    lookup_index: bool,
    /// Whether to keep a line table beside the index.
    line_table: bool,
    /// How many threads build the points (`None`: the available parallelism), validated at `build`.
    build_threads: Option<usize>,
    /// The members to start with (name, weight, identity when apart from the name), validated at `build`.
    nodes: Vec<(String, f64, Option<String>)>,
}

impl Default for RingBuilder {
    fn default() -> RingBuilder {
        RingBuilder::new()
    }
}

impl RingBuilder {
    /// A builder with every setting at its default.
    pub fn new() -> RingBuilder {
        RingBuilder {
            vnodes: DEFAULT_VNODES,
            hash: HashFunction::default(),
            scheme: PointScheme::Plain,
            max_points: DEFAULT_MAX_POINTS,
            lookup_index: true,
            line_table: false,
            build_threads: None,
            nodes: Vec::new(),
        }
    }

    /// Points per node of weight 1; a node of weight `w` gets `max(1, round(vnodes × w))`.
    ///
    /// By default, this is 160 (what ketama uses per server). Must be at least 1.
    pub fn vnodes(mut self, vnodes: u32) -> RingBuilder {
        self.vnodes = vnodes;
        self
    }

    /// The hash of keys and of node point names.
    ///
    /// By default, this is [`HashFunction::Xxh3`].
    pub fn hash(mut self, hash: HashFunction) -> RingBuilder {
        self.hash = hash;
        self
    }

    /// How nodes become points.
    ///
    /// By default, this is [`PointScheme::Plain`].
    pub fn point_scheme(mut self, scheme: PointScheme) -> RingBuilder {
        self.scheme = scheme;
        self
    }

    /// The most points the ring may ever hold; a change that would exceed it fails with
    /// [`Error::TooManyPoints`]. This bounds memory when weights or vnodes are large.
    ///
    /// By default, this is 2^26 (67,108,864 points, 512 MiB).
    pub fn max_points(mut self, max_points: u64) -> RingBuilder {
        self.max_points = max_points;
        self
    }

    /// Whether to keep an index over the top bits of positions (up to 4 bytes a point) that makes
    /// lookups several times faster on large rings. Placement is the same either way.
    ///
    /// By default, this is on.
    pub fn lookup_index(mut self, yes: bool) -> RingBuilder {
        self.lookup_index = yes;
        self
    }

    /// Whether to keep, beside the lookup index, a line table: one 64-byte cache line for every four
    /// index buckets (4 to 8 points), holding 16 bits of each point's position and its node, so that a
    /// lookup reads one line where the index alone reads its entry and then the points, two cache
    /// misses that wait on each other once the ring is larger than the caches (see `ring/lines.rs`).
    /// Placement is the same either way.
    ///
    /// It costs 8 to 16 bytes a point on top of the default's 10 to 12 (BENCHMARKS.md, "Memory"),
    /// which is why it is off by default: the default ring stays within 16 bytes a point. It speeds
    /// up single and batched lookups at every size, most where the ring outgrows the caches
    /// (BENCHMARKS.md, `shardring-ring-lines` against `shardring-ring`). Builds and node removals
    /// also write the table (one pass over its lines); adding a node updates the lines it touches.
    /// Kept only with the index on, for up to 65,535 nodes (a line names nodes in 16 bits) and up to
    /// 8,388,608 points (past them, the index stops growing and lines would hold more points than
    /// they have room for); otherwise ignored, and dropped or made again as membership changes.
    ///
    /// By default, this is off.
    pub fn line_table(mut self, yes: bool) -> RingBuilder {
        self.line_table = yes;
        self
    }

    /// How many threads build the ring's points: the nodes' point names are hashed, and the points
    /// sorted, in shares that threads work on at the same time. Placement does not depend on it: a
    /// ring built on any number of threads is the same, point for point, as one built on one.
    ///
    /// Only builds of 65,536 points or more (410 nodes of 160 points) use threads, at most one per
    /// 32,768 points; smaller rings are built on the calling thread alone. The calling thread takes a
    /// share, the others are started for the build and have ended when it returns. The setting also
    /// applies to the full rebuilds that membership changes cause under the compatibility schemes
    /// whose points depend on every node; otherwise [`Ring::add`], [`Ring::remove`] and
    /// [`Ring::set_weight`] change the ring in place, on the calling thread.
    ///
    /// By default, this is 1: the calling thread alone, because a library call that starts threads
    /// surprises callers that budget their own (async runtimes, thread pools). Pass
    /// [`std::thread::available_parallelism`] to use every core. Must be at least 1.
    ///
    /// ```
    /// use shardring::Ring;
    ///
    /// let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    /// let names: Vec<String> = (0..1000).map(|i| format!("cache-{i}")).collect();
    /// let ring = Ring::builder().build_threads(cores).nodes(names).build()?;
    /// assert_eq!(ring.point_count(), 160_000);
    /// # Ok::<(), shardring::Error>(())
    /// ```
    pub fn build_threads(mut self, threads: usize) -> RingBuilder {
        self.build_threads = Some(threads);
        self
    }

    /// Adds a member.
    pub fn node(mut self, name: impl Into<String>, weight: f64) -> RingBuilder {
        self.nodes.push((name.into(), weight, None));
        self
    }

    /// Adds a member whose points derive from `identity` rather than its name (see [`Node::identity`]).
    pub fn node_with_identity(
        mut self,
        name: impl Into<String>,
        identity: impl Into<String>,
        weight: f64,
    ) -> RingBuilder {
        self.nodes
            .push((name.into(), weight, Some(identity.into())));
        self
    }

    /// Adds members of weight 1.
    pub fn nodes<I, S>(mut self, names: I) -> RingBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes
            .extend(names.into_iter().map(|name| (name.into(), 1.0, None)));
        self
    }

    /// Builds the ring.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for zero vnodes or zero build threads; [`Error::EmptyName`], [`Error::InvalidWeight`] or
    /// [`Error::DuplicateNode`] for a bad member; [`Error::TooManyPoints`] past the limit.
    pub fn build(self) -> Result<Ring, Error> {
        if self.vnodes == 0 {
            return Err(Error::InvalidSetting {
                setting: "vnodes",
                reason: "must be at least 1".into(),
            });
        }
        let build_threads = match self.build_threads {
            None => None,
            Some(threads) => {
                Some(
                    NonZeroUsize::new(threads).ok_or_else(|| Error::InvalidSetting {
                        setting: "build_threads",
                        reason: "must be at least 1".into(),
                    })?,
                )
            }
        };
        let mut nodes: Vec<Node> = Vec::with_capacity(self.nodes.len());
        let mut invalid = None;
        for (rank, (name, weight, identity)) in self.nodes.into_iter().enumerate() {
            let node = match identity {
                Some(identity) => Node::with_identity(name, identity, weight),
                None => Node::weighted(name, weight),
            };
            match node {
                Ok(mut node) => {
                    // Configuration order: the compatibility schemes break ties by it.
                    node.set_rank(u32::try_from(rank).unwrap_or(u32::MAX));
                    nodes.push(node);
                }
                Err(e) => {
                    invalid = Some(e);
                    break;
                }
            }
        }
        // The first member whose name came before, if it comes before the first invalid member
        // (the names are checked in place, without copies).
        let mut seen = std::collections::HashSet::with_capacity(nodes.len());
        if let Some(node) = nodes.iter().find(|n| !seen.insert(n.name())) {
            return Err(Error::DuplicateNode {
                node: node.name().to_string(),
            });
        }
        if let Some(e) = invalid {
            return Err(e);
        }
        let mut ring = Ring {
            nodes,
            points: Vec::new(),
            index: TopBitsIndex::default(),
            lines: None,
            use_index: self.lookup_index,
            use_lines: self.line_table,
            hash: self.hash,
            scheme: self.scheme,
            vnodes: self.vnodes,
            max_points: self.max_points,
            build_threads,
        };
        ring.rebuild()?;
        Ok(ring)
    }
}
