//! The library's one error type.

/// Everything that can go wrong when building or changing a placement.
///
/// Lookups never fail: a lookup on an empty placement returns `None`. Errors come only from constructors
/// and membership changes, and each variant carries the data needed to explain it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A node was given a weight that is zero, negative, or not a finite number.
    #[error("node {node:?} has weight {weight}: a weight must be a finite number greater than 0")]
    InvalidWeight {
        /// The node's name.
        node: String,
        /// The rejected weight.
        weight: f64,
    },
    /// A node with this name is already a member.
    #[error("node {node:?} is already a member")]
    DuplicateNode {
        /// The node's name.
        node: String,
    },
    /// A node name was empty.
    #[error("a node name must not be empty")]
    EmptyName,
    /// The named node is not a member.
    #[error("node {node:?} is not a member")]
    UnknownNode {
        /// The node's name.
        node: String,
    },
    /// The placement would need more points (or table entries, or nodes) than its limit allows.
    #[error("{requested} points requested, more than the limit of {limit}")]
    TooManyPoints {
        /// How many points the change would have needed in total.
        requested: u64,
        /// The configured limit.
        limit: u64,
    },
    /// A setting is out of its range (e.g. zero virtual nodes).
    #[error("invalid setting {setting}: {reason}")]
    InvalidSetting {
        /// The setting's name.
        setting: &'static str,
        /// Why the value was refused.
        reason: String,
    },
    /// A hash function name was not recognised.
    #[error("unknown hash {name:?}; known hashes: {known}")]
    UnknownHash {
        /// The name that was given.
        name: String,
        /// The names that are accepted, comma-separated.
        known: String,
    },
    /// The placement algorithm does not support this operation (e.g. weights for jump hash).
    #[error("{algorithm} does not support {what}")]
    Unsupported {
        /// The algorithm's name.
        algorithm: &'static str,
        /// What was asked of it.
        what: &'static str,
    },
    /// A background thread (e.g. the rebalancer's) could not be started.
    #[error("could not start a background thread: {reason}")]
    Spawn {
        /// What the operating system said.
        reason: String,
    },
}
