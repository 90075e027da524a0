//! A member of a placement: a name and a weight.

use std::fmt;

use crate::Error;

/// A server (or any bucket) that keys are placed on.
///
/// The name is how placements compare nodes and what lookups report. The weight scales the node's share of
/// keys relative to a weight of 1.
///
/// Points are derived from the node's [identity](Node::identity), which is its name unless set apart with
/// [`Node::with_identity`]. Compatibility modes need the two apart: twemproxy reports a server as
/// `10.0.0.1:11211` but hashes it as `10.0.0.1` (it drops port 11211), and libmemcached's SPY mode hashes
/// `/10.0.0.1:11211`.
#[derive(Debug, Clone)]
pub struct Node {
    /// The name: unique within a placement, never empty, what lookups report.
    name: Box<str>,
    /// The string the node's points are derived from, when it is not the name.
    identity: Option<Box<str>>,
    /// The relative share of keys; finite and greater than zero.
    weight: f64,
    /// The node's place in its placement's configuration order, set by the ring (builder position, then
    /// one past the last for each `add`). Only the compatibility schemes look at it: the programs they
    /// reproduce break ties between equal points by configuration order.
    rank: u32,
}

impl PartialEq for Node {
    /// Nodes are equal when their name, identity and weight are: the configuration rank is the ring's
    /// bookkeeping, not part of what the node is.
    fn eq(&self, other: &Node) -> bool {
        self.name == other.name && self.identity == other.identity && self.weight == other.weight
    }
}

impl Node {
    /// A node of weight 1.
    ///
    /// # Errors
    /// [`Error::EmptyName`] when `name` is empty.
    pub fn new(name: impl Into<String>) -> Result<Node, Error> {
        Node::weighted(name, 1.0)
    }

    /// A node with a weight.
    ///
    /// # Errors
    /// [`Error::EmptyName`] when `name` is empty; [`Error::InvalidWeight`] when `weight` is zero, negative,
    /// infinite or NaN.
    pub fn weighted(name: impl Into<String>, weight: f64) -> Result<Node, Error> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if !(weight.is_finite() && weight > 0.0) {
            return Err(Error::InvalidWeight { node: name, weight });
        }
        Ok(Node {
            name: name.into_boxed_str(),
            identity: None,
            weight,
            rank: 0,
        })
    }

    /// A node whose points are derived from `identity` rather than from its name.
    ///
    /// # Errors
    /// As for [`Node::weighted`]; [`Error::EmptyName`] also when `identity` is empty.
    pub fn with_identity(
        name: impl Into<String>,
        identity: impl Into<String>,
        weight: f64,
    ) -> Result<Node, Error> {
        let mut node = Node::weighted(name, weight)?;
        let identity = identity.into();
        if identity.is_empty() {
            return Err(Error::EmptyName);
        }
        if identity.as_str() != node.name() {
            node.identity = Some(identity.into_boxed_str());
        }
        Ok(node)
    }

    /// The string the node's points are derived from: the identity given to
    /// [`with_identity`](Node::with_identity), else the name.
    pub fn identity(&self) -> &str {
        self.identity.as_deref().unwrap_or(&self.name)
    }

    /// The node's place in configuration order (see [`Ring`](crate::Ring)'s compatibility schemes).
    pub(crate) fn rank(&self) -> u32 {
        self.rank
    }

    /// Sets the node's place in configuration order.
    pub(crate) fn set_rank(&mut self, rank: u32) {
        self.rank = rank;
    }

    /// The same node with another weight (identity kept).
    ///
    /// # Errors
    /// [`Error::InvalidWeight`] when `weight` is zero, negative, infinite or NaN.
    pub fn reweighted(&self, weight: f64) -> Result<Node, Error> {
        if !(weight.is_finite() && weight > 0.0) {
            return Err(Error::InvalidWeight {
                node: self.name.to_string(),
                weight,
            });
        }
        Ok(Node {
            weight,
            ..self.clone()
        })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's weight.
    pub fn weight(&self) -> f64 {
        self.weight
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names_and_weights() {
        assert_eq!(Node::new(""), Err(Error::EmptyName));
        for w in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Node::weighted("a", w),
                Err(Error::InvalidWeight { .. })
            ));
        }
        let n = Node::weighted("10.0.0.1:11211", 2.5).unwrap();
        assert_eq!((n.name(), n.weight()), ("10.0.0.1:11211", 2.5));
        assert_eq!(n.identity(), "10.0.0.1:11211");
        let n = Node::with_identity("10.0.0.1:11211", "10.0.0.1", 1.0).unwrap();
        assert_eq!((n.name(), n.identity()), ("10.0.0.1:11211", "10.0.0.1"));
        assert_eq!(n.reweighted(3.0).unwrap().identity(), "10.0.0.1");
        assert_eq!(Node::with_identity("a", "", 1.0), Err(Error::EmptyName));
    }
}
