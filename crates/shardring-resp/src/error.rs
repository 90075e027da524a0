//! Why a reply cannot be read.

/// A server reply that cannot be framed (bytes that are not RESP, or a reply over its
/// [`ReplyLimits`](crate::ReplyLimits)) or, once framed, read into a [`Value`](crate::Value). Either
/// way the connection it came from is out of step and must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed server reply: {reason}")]
pub struct ReplyError {
    /// What was wrong.
    pub reason: &'static str,
}

/// A [`ReplyError`] for `reason`.
pub(crate) fn bad(reason: &'static str) -> ReplyError {
    ReplyError { reason }
}
