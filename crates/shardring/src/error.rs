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
    /// A configuration file has problems; every one found is listed, in file order.
    #[error("{}", ConfigProblem::render(problems))]
    InvalidConfig {
        /// Each problem with its line and key.
        problems: Vec<ConfigProblem>,
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

/// One problem of a configuration file: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The 1-based line of the file the problem is on (0 when it concerns the whole file).
    pub line: usize,
    /// The key concerned, as `POOL.KEY` (or `POOL`, or empty for the whole file).
    pub key: String,
    /// What is wrong, in nutcracker's words where it has some.
    pub message: String,
}

impl ConfigProblem {
    fn render(problems: &[ConfigProblem]) -> String {
        let mut out = format!(
            "{} problem{} in the configuration:",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
        for p in problems {
            out.push_str("\n  ");
            out.push_str(&p.to_string());
        }
        out
    }
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: ", self.line)?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}
