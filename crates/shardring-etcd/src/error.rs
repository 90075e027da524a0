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
        source: ClientError,
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
        source: ClientError,
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
    /// A cut-over found no next membership to make current (nothing under `next_prefix`).
    #[error("no next membership under {next_prefix}: nothing to cut over to")]
    NoNext {
        /// The pool's `next/` prefix.
        next_prefix: String,
    },
    /// A guarded write found the keys it read changed before it could write (a concurrent
    /// `shardring members` or a second migration); nothing was written.
    #[error("{prefix} changed since it was read at revision {read_revision}; nothing was written: {what}")]
    Changed {
        /// The prefix whose keys changed.
        prefix: String,
        /// The revision the write was based on.
        read_revision: i64,
        /// What was being done.
        what: String,
    },
    /// A value an operation depends on cannot be read (a malformed server under `servers/` or `next/` at a
    /// cut-over, a malformed proxy registration); nothing was written.
    #[error("{0}")]
    Malformed(MalformedValue),
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

/// What the etcd client said, in words: its own message, then each underlying cause once
/// (`tcp connect error: Connection refused (os error 111)`), where the client's own `Display` shows
/// a gRPC status with the `Debug` form of its transport error inside. The client's error is kept
/// ([`ClientError::inner`]) for code that matches on it.
#[derive(Debug)]
pub struct ClientError(etcd_client::Error);

impl ClientError {
    /// The etcd client's error.
    pub fn inner(&self) -> &etcd_client::Error {
        &self.0
    }
}

impl From<etcd_client::Error> for ClientError {
    fn from(e: etcd_client::Error) -> ClientError {
        ClientError(e)
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut cause: Option<&(dyn std::error::Error + 'static)> = match &self.0 {
            etcd_client::Error::GRpcStatus(status) => {
                let message = status.message();
                parts.push(if message.is_empty() {
                    status.code().description().to_owned()
                } else {
                    message.to_owned()
                });
                std::error::Error::source(status)
            }
            etcd_client::Error::TransportError(e) => {
                parts.push(e.to_string());
                std::error::Error::source(e)
            }
            other => {
                parts.push(other.to_string());
                None
            }
        };
        while let Some(c) = cause {
            let text = c.to_string();
            // tonic's wrapper says only "transport error"; a message already given is not repeated.
            // A cause whose text ends the previous part (`h2 protocol error: <cause>`) is not
            // repeated either.
            if text != "transport error" && !parts.iter().any(|p| p.ends_with(text.as_str())) {
                parts.push(text);
            }
            cause = c.source();
        }
        f.write_str(&parts.join(": "))
    }
}

impl std::error::Error for ClientError {}

/// `error` and each of its causes, joined by `: ` (what `anyhow`'s `{:#}` prints): for log lines,
/// where an error's `Display` alone leaves its cause out.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
