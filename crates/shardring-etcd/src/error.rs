//! The crate's errors.

use std::time::Duration;

/// Why etcd could not be read or watched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// The endpoints are unusable (bad URL, none given).
    #[error("invalid etcd endpoints {endpoints:?}")]
    Endpoints {
        /// The endpoints as given.
        endpoints: Vec<String>,
        /// What the client said.
        #[source]
        source: etcd_client::Error,
    },
    /// A request to etcd failed (unreachable, refused, reset, an error status).
    #[error("etcd at {endpoints:?}: {what} failed")]
    Request {
        /// The endpoints.
        endpoints: Vec<String>,
        /// What was being done (`range /shardring/alpha/servers/`, `watch …`).
        what: String,
        /// What the client said.
        #[source]
        source: etcd_client::Error,
    },
    /// A request to etcd got no answer in time (nothing listening that answers gRPC, a partition).
    #[error("etcd at {endpoints:?}: {what} got no answer within {timeout:?}")]
    Timeout {
        /// The endpoints.
        endpoints: Vec<String>,
        /// What was being done.
        what: String,
        /// How long was waited.
        timeout: Duration,
    },
    /// The watch stream ended or was cancelled by etcd.
    #[error("the etcd watch on {prefix} ended: {reason}")]
    WatchEnded {
        /// The watched prefix.
        prefix: String,
        /// What etcd said, or that the stream closed.
        reason: String,
    },
    /// The watched revision was compacted away; a fresh range is needed (the source does it itself).
    #[error("revision {wanted} of {prefix} was compacted (etcd keeps revisions from {compacted})")]
    Compacted {
        /// The watched prefix.
        prefix: String,
        /// The revision the watch wanted to start from.
        wanted: i64,
        /// The compaction revision etcd reported.
        compacted: i64,
    },
    /// An admin write was refused (e.g. the server to remove is not there).
    #[error("{0}")]
    Refused(String),
}

/// A server key whose value (or key) cannot be read as a member: that server is skipped, the problem is
/// logged and counted, and the rest of the pool applies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed server {key}={value:?}: {reason}")]
pub struct MalformedValue {
    /// The key, lossily decoded.
    pub key: String,
    /// The value, lossily decoded.
    pub value: String,
    /// What is wrong.
    pub reason: String,
}
