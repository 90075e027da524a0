//! How a node's name becomes its points on the circle.

use crate::hash::{HashFunction, KeyHash};
use crate::Node;

/// The rule that turns a node into its positions on the 32-bit circle.
///
/// Compatibility modes (ketama and friends) add their own variants; every variant is deterministic and
/// depends only on the node, the ring's key hash and its points per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PointScheme {
    /// The library's own scheme. A node of weight `w` gets `max(1, round(vnodes × w))` points; point `i`
    /// (counting from 0) sits at `hash32("{name}-{i}")`, with the ring's key hash and `i` in decimal.
    ///
    /// A node's points depend on nothing but its own name and weight, so adding, removing or re-weighting
    /// one node never moves another node's points; and since point `i` does not depend on the count,
    /// raising a node's weight keeps its old points and adds new ones (keys only move *to* it).
    Plain,
}

/// What a scheme may look at when it places a node's points.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SchemeInput {
    /// Points per node of weight 1.
    pub vnodes: u32,
    /// The ring's key hash.
    pub hash: HashFunction,
}

impl PointScheme {
    /// How many points `node` gets.
    pub(crate) fn point_count(self, node: &Node, input: SchemeInput) -> u64 {
        match self {
            PointScheme::Plain => {
                let wanted = (f64::from(input.vnodes) * node.weight()).round();
                // `as` saturates for floats beyond u64's range; the caller checks the limit.
                (wanted as u64).max(1)
            }
        }
    }

    /// Appends `count` positions of `node` to `out`.
    pub(crate) fn positions(self, node: &Node, count: u64, input: SchemeInput, out: &mut Vec<u32>) {
        match self {
            PointScheme::Plain => {
                let mut key = Vec::with_capacity(node.name().len() + 21);
                key.extend_from_slice(node.name().as_bytes());
                key.push(b'-');
                let prefix = key.len();
                let mut digits = [0u8; 20];
                for i in 0..count {
                    key.truncate(prefix);
                    key.extend_from_slice(crate::decimal::format_u64(&mut digits, i));
                    out.push(input.hash.hash32(&key));
                }
            }
        }
    }
}
