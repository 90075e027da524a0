//! A member of a placement: a name and a weight.

use std::fmt;

use crate::Error;

/// A server (or any bucket) that keys are placed on.
///
/// The name is the node's identity: placements derive the node's points from it, compare nodes by it, and
/// report it back from lookups. The weight scales the node's share of keys relative to a weight of 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The identity: unique within a placement, never empty.
    name: Box<str>,
    /// The relative share of keys; finite and greater than zero.
    weight: f64,
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
            weight,
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
    }
}
