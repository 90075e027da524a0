//! The placement algorithms, selectable by name, all behind [`Placement`].
//!
//! | name | algorithm | weights | remove any node |
//! |---|---|---|---|
//! | `ring` | [`Ring`]: consistent hashing with virtual nodes | yes | yes |

use std::fmt;
use std::str::FromStr;

use crate::hash::HashFunction;
use crate::{Error, Node, Placement, Ring};

/// The algorithms [`build`] can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// The virtual-node ring.
    #[default]
    Ring,
}

impl Algorithm {
    /// Every algorithm, in the order `shardring analyze --algo all` reports them.
    pub const ALL: &'static [Algorithm] = &[Algorithm::Ring];

    /// The name `--algo` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

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
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AlgorithmOptions {
    /// The key hash. By default, this is [`HashFunction::Xxh3`].
    pub hash: HashFunction,
    /// Ring points per node of weight 1. By default, this is 160.
    pub vnodes: u32,
}

impl Default for AlgorithmOptions {
    fn default() -> AlgorithmOptions {
        AlgorithmOptions {
            hash: HashFunction::default(),
            vnodes: crate::ring::DEFAULT_VNODES,
        }
    }
}

/// Builds `algorithm` over `nodes`.
///
/// # Errors
/// Whatever the algorithm's constructor refuses: duplicate nodes, weights it does not support, limits.
pub fn build(
    algorithm: Algorithm,
    nodes: &[Node],
    options: &AlgorithmOptions,
) -> Result<Box<dyn Placement>, Error> {
    match algorithm {
        Algorithm::Ring => {
            let builder = Ring::builder().hash(options.hash).vnodes(options.vnodes);
            let ring = nodes
                .iter()
                .fold(builder, |b, n| b.node(n.name(), n.weight()))
                .build()?;
            Ok(Box::new(ring))
        }
    }
}
