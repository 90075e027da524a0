//! The placement algorithms, selectable by name, all behind [`Placement`].
//!
//! | name | algorithm | weights | remove any node | keys moved on removing a middle node | lookup |
//! |---|---|---|---|---|---|
//! | `ring` | [`Ring`]: consistent hashing with virtual nodes | yes | yes | its keys only | O(log points) |
//! | `jump` | [`Jump`]: jump consistent hash (Lamping & Veach 2014) | no | yes, see below | about 2/N | O(log N) |
//! | `jumpback` | [`Jump::jump_back`]: JumpBackHash (Ertl 2024), jump's guarantees in O(1) | no | yes, see below | about 2/N | O(1) |
//! | `rendezvous` | [`Rendezvous`]: highest random weight, logarithmic weights | yes | yes | its keys only | O(N) |
//! | `maglev` | [`Maglev`]: Google's lookup table (Eisenbud et al. 2016) | yes | yes | its keys and a few more | O(1) |
//! | `multiprobe` | [`MultiProbe`]: multi-probe consistent hashing (Appleton & O'Reilly 2015) | no | yes | its keys only | O(probes × log N) |
//! | `anchor` | [`Anchor`]: AnchorHash (Mendelson et al. 2020), bounded capacity | no | yes | its keys only | O(1 + ln(capacity / N)) |
//! | `memento` | [`Memento`]: MementoHash (Coluzzi et al. 2024), jump plus a replacement set | no | yes | its keys only | O(log N) + removals |
//!
//! "Weights: no" means [`build`] and [`Placement::add`] refuse a node whose weight is not 1 with
//! [`Error::Unsupported`], instead of silently ignoring the weight.
//!
//! Jump (and jumpback) numbers its buckets `0..N` in the order nodes are given; removing a node from the middle moves
//! the last node into the hole, which moves the removed node's keys *and* the last node's keys (about
//! 2/N in all). Memento is the answer when any node must be removable at the cost of exactly its keys.
//! Maglev rebuilds its table on every change, and a rebuilt table also shuffles a few entries between
//! surviving nodes: `shardring analyze` reports that extra movement.
//!
//! Every algorithm is deterministic: the same nodes (in the same order, for the numbered-bucket
//! algorithms jump, anchor and memento) give the same placement in every process.

pub mod anchor;
pub mod jump;
pub mod maglev;
pub mod memento;
pub mod multiprobe;
pub mod rendezvous;

#[cfg(test)]
mod tests;

/// `{prefix}0`, `{prefix}1`, …: members for the algorithms' unit tests.
#[cfg(test)]
pub(crate) fn test_nodes(prefix: &str, n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node::new(format!("{prefix}{i}")).unwrap())
        .collect()
}

use std::fmt;
use std::str::FromStr;

pub use self::anchor::Anchor;
pub use self::jump::{jump_back_hash, jump_hash, Jump};
pub use self::maglev::Maglev;
pub use self::memento::Memento;
pub use self::multiprobe::MultiProbe;
pub use self::rendezvous::Rendezvous;

use crate::hash::HashFunction;
use crate::{Error, Node, Placement, Ring};

/// The algorithms [`build`] can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// The virtual-node ring.
    #[default]
    Ring,
    /// Jump consistent hash over numbered buckets: no memory, even spread, equal weights only.
    Jump,
    /// JumpBackHash: jump's guarantees (and limits) with expected constant-time lookups.
    JumpBack,
    /// Rendezvous (highest random weight) hashing with logarithmic weights: exact movement, O(N) lookups.
    Rendezvous,
    /// Maglev's prime-sized lookup table: O(1) lookups, near-perfect balance, a little extra movement.
    Maglev,
    /// Multi-probe consistent hashing: one point per node, several probes per key.
    MultiProbe,
    /// AnchorHash: jump-like speed, any node removable, up to a fixed capacity.
    Anchor,
    /// MementoHash: jump plus a replacement set, any node removable, no capacity limit.
    Memento,
}

impl Algorithm {
    /// Every algorithm, in the order `shardring analyze --algo all` reports them.
    pub const ALL: &'static [Algorithm] = &[
        Algorithm::Ring,
        Algorithm::Jump,
        Algorithm::JumpBack,
        Algorithm::Rendezvous,
        Algorithm::Maglev,
        Algorithm::MultiProbe,
        Algorithm::Anchor,
        Algorithm::Memento,
    ];

    /// The name `--algo` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Jump => "jump",
            Algorithm::JumpBack => "jumpback",
            Algorithm::Rendezvous => "rendezvous",
            Algorithm::Maglev => "maglev",
            Algorithm::MultiProbe => "multiprobe",
            Algorithm::Anchor => "anchor",
            Algorithm::Memento => "memento",
        }
    }

    /// Whether the algorithm accepts nodes whose weight is not 1 (the others refuse them with
    /// [`Error::Unsupported`]).
    pub const fn supports_weights(self) -> bool {
        matches!(
            self,
            Algorithm::Ring | Algorithm::Rendezvous | Algorithm::Maglev
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    /// Accepts the names of [`Algorithm::name`], case-insensitive, with `-` and `_` ignored
    /// (`multi-probe` is `multiprobe`).
    fn from_str(s: &str) -> Result<Algorithm, Error> {
        let wanted = s.trim().to_ascii_lowercase().replace(['_', '-'], "");
        Algorithm::ALL
            .iter()
            .copied()
            .find(|a| a.name().replace('-', "") == wanted)
            .ok_or_else(|| Error::InvalidSetting {
                setting: "algorithm",
                reason: format!(
                    "unknown algorithm {s:?}; known: {}",
                    Algorithm::ALL
                        .iter()
                        .map(|a| a.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }
}

/// Settings shared by the algorithms; each uses the ones that apply to it.
///
/// Start from the default and change what you need (the struct is `non_exhaustive`, so new settings
/// can be added without breaking callers):
///
/// ```
/// use shardring::algo::{build, Algorithm, AlgorithmOptions};
/// use shardring::Node;
///
/// let mut options = AlgorithmOptions::default();
/// options.probes = 31;
/// let nodes = vec![Node::new("a")?, Node::new("b")?];
/// let placement = build(Algorithm::MultiProbe, &nodes, &options)?;
/// assert!(placement.lookup(b"user:1").is_some());
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AlgorithmOptions {
    /// The key hash. By default, this is [`HashFunction::Xxh3`].
    pub hash: HashFunction,
    /// Ring points per node of weight 1 (ring only). By default, this is 160.
    pub vnodes: u32,
    /// Maglev's lookup-table size; rounded up to the next prime, and fixed for the life of the table
    /// (membership changes refill it, they do not resize it, as in the paper).
    ///
    /// By default, this is `None`: the next prime at or above the larger of 100 × the initial node
    /// count and 65,537 (the paper's small table), so that nodes added later still get about 100
    /// entries each up to 655 nodes; capped at 2^26 slots (256 MiB).
    pub maglev_table_size: Option<u64>,
    /// Multi-probe's probes per key: more probes, better balance, slower lookups.
    ///
    /// By default, this is 21, the paper's choice for a peak-to-mean ratio near 1.05.
    pub probes: u32,
    /// AnchorHash's capacity: the most nodes the placement can ever hold. Lookups slow down
    /// (logarithmically) as the capacity grows past the node count.
    ///
    /// By default, this is `None`: twice the initial node count, and at least 16.
    pub anchor_capacity: Option<u32>,
    /// Whether the ring keeps a line table ([`RingBuilder::line_table`](crate::RingBuilder::line_table)):
    /// one cache miss a lookup, for 8 to 16 more bytes a point (ring only).
    ///
    /// By default, this is false.
    pub line_table: bool,
}

impl Default for AlgorithmOptions {
    fn default() -> AlgorithmOptions {
        AlgorithmOptions {
            hash: HashFunction::default(),
            vnodes: crate::ring::DEFAULT_VNODES,
            maglev_table_size: None,
            probes: multiprobe::DEFAULT_PROBES,
            anchor_capacity: None,
            line_table: false,
        }
    }
}

/// Builds `algorithm` over `nodes`.
///
/// # Errors
/// Whatever the algorithm's constructor refuses: [`Error::DuplicateNode`], [`Error::Unsupported`] for
/// weights the algorithm does not support, [`Error::InvalidSetting`] and [`Error::TooManyPoints`] for
/// settings out of range.
pub fn build(
    algorithm: Algorithm,
    nodes: &[Node],
    options: &AlgorithmOptions,
) -> Result<Box<dyn Placement>, Error> {
    Ok(match algorithm {
        Algorithm::Ring => {
            let builder = Ring::builder()
                .hash(options.hash)
                .vnodes(options.vnodes)
                .line_table(options.line_table);
            let ring = nodes
                .iter()
                .fold(builder, |b, n| b.node(n.name(), n.weight()))
                .build()?;
            Box::new(ring)
        }
        Algorithm::Jump => Box::new(Jump::new(nodes, options.hash)?),
        Algorithm::JumpBack => Box::new(Jump::jump_back(nodes, options.hash)?),
        Algorithm::Rendezvous => Box::new(Rendezvous::new(nodes, options.hash)?),
        Algorithm::Maglev => Box::new(Maglev::new(nodes, options.hash, options.maglev_table_size)?),
        Algorithm::MultiProbe => Box::new(MultiProbe::new(nodes, options.hash, options.probes)?),
        Algorithm::Anchor => Box::new(Anchor::new(nodes, options.hash, options.anchor_capacity)?),
        Algorithm::Memento => Box::new(Memento::new(nodes, options.hash)?),
    })
}

/// MurmurHash3's 64-bit finalizer: a bijection with full avalanche, so every input bit flips each
/// output bit with probability about one half.
#[inline]
pub(crate) fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// A hash of `a` under seed `b`: independent-looking values for different seeds, which is what the
/// rehashing algorithms (anchor, memento, replica retries) need. Both arguments go through the
/// finalizer, so structure in small seeds (0, 1, 2, …) does not show through.
#[inline]
pub(crate) fn mix2(a: u64, b: u64) -> u64 {
    fmix64(a ^ fmix64(b.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// A node name's 64-bit hash under `seed`, independent of the key hash the user picked: node identity
/// must not change when the key hash does not, and xxh3 is well mixed for any name.
#[inline]
pub(crate) fn name_hash(name: &str, seed: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), seed)
}

/// The index of the member named `name`.
pub(crate) fn position(nodes: &[Node], name: &str) -> Option<usize> {
    nodes.iter().position(|n| n.name() == name)
}

/// Refuses `node` when a member of `nodes` already has its name (the check before every `add`).
pub(crate) fn check_new(nodes: &[Node], node: &Node) -> Result<(), Error> {
    match position(nodes, node.name()) {
        Some(_) => Err(Error::DuplicateNode {
            node: node.name().to_string(),
        }),
        None => Ok(()),
    }
}

/// Refuses duplicate names in `nodes`.
pub(crate) fn check_unique(nodes: &[Node]) -> Result<(), Error> {
    let mut seen = std::collections::HashSet::with_capacity(nodes.len());
    for node in nodes {
        if !seen.insert(node.name()) {
            return Err(Error::DuplicateNode {
                node: node.name().to_string(),
            });
        }
    }
    Ok(())
}

/// Refuses a weight other than 1 for an algorithm that has no weights, so a weight is never silently
/// ignored.
pub(crate) fn require_unit_weight(algorithm: &'static str, node: &Node) -> Result<(), Error> {
    if node.weight() == 1.0 {
        Ok(())
    } else {
        Err(Error::Unsupported {
            algorithm,
            what: "node weights other than 1",
        })
    }
}

/// Refuses a node count past what `u32` bucket numbers can hold.
pub(crate) fn check_count(count: usize) -> Result<(), Error> {
    if count >= u32::MAX as usize {
        Err(Error::TooManyPoints {
            requested: count as u64,
            limit: u32::MAX as u64 - 1,
        })
    } else {
        Ok(())
    }
}

/// Replicas for the algorithms that map a 64-bit key hash to one node (jump, anchor, memento): the
/// first replica is the owner of `hash`, each further one the owner of `mix2(hash, attempt)` for
/// attempts 1, 2, … until `count` distinct nodes are found. Each replica is therefore placed by the
/// algorithm itself and keeps its consistency (a replica moves only if the algorithm moves that rehash).
///
/// After a bounded number of attempts (a coupon-collector worst case when `count` is close to the node
/// count) the remaining nodes are taken in index order from a key-dependent start, so the walk always
/// ends with `min(count, len)` distinct nodes.
pub(crate) fn replicas_by_rehash(
    hash: u64,
    len: usize,
    count: usize,
    out: &mut Vec<usize>,
    locate: impl Fn(u64) -> Option<usize>,
) {
    out.clear();
    let want = count.min(len);
    if want == 0 {
        return;
    }
    let Some(first) = locate(hash) else {
        return;
    };
    out.push(first);
    let max_attempts = 16 * want as u64 + 64;
    let mut attempt = 1u64;
    while out.len() < want && attempt <= max_attempts {
        if let Some(i) = locate(mix2(hash, attempt)) {
            if !out.contains(&i) {
                out.push(i);
            }
        }
        attempt += 1;
    }
    let start = (hash % len as u64) as usize;
    for j in 0..len {
        if out.len() >= want {
            break;
        }
        let i = (start + j) % len;
        if !out.contains(&i) {
            out.push(i);
        }
    }
}
