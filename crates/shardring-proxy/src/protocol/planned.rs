//! The rule of dual writes for every protocol (a pool with a planned change, `shardring migrate`):
//! when a write that reached the key's owner now and its owner next may be acknowledged.
//!
//! Not when the next owner did not take it: once the copy is done nothing would bring the write
//! there, and the cut-over would lose it. The next owner did not take it when it could not be
//! reached (a failure of the connection, a timeout), and when it refused the write for the state
//! of its server rather than for the command (memcached's `SERVER_ERROR`: out of memory, an item
//! over its size limit; Redis's `-OOM`, `-READONLY`, `-MOVED`, `-LOADING`…) while the owner now
//! took it. A reply that depends on the value the next owner holds (a `NOT_STORED`, Redis's
//! `-WRONGTYPE` for a key it has no copy of yet) is expected before the copy, which replaces that
//! value: it is counted as a disagreement, not refused. The protocols differ only in which replies
//! are errors and which errors refuse a write.

use super::{PartReply, Reply};
use crate::error::BackendError;

/// How a protocol reads a dual write's replies.
pub(crate) struct Errors {
    /// Whether a reply is an error (the client gets the owner now's error as it is).
    pub(crate) is_error: fn(&[u8]) -> bool,
    /// Whether an error refuses the write for the state of its server.
    pub(crate) refuses: fn(&[u8]) -> bool,
}

/// The failure a dual write answers with, when its next owner (whose reply is `next`) did not take
/// the write that the owner now's reply `now` acknowledges; `None` when it may be acknowledged.
pub(crate) fn not_taken(
    now: &Reply,
    next: &PartReply<'_>,
    errors: &Errors,
) -> Option<BackendError> {
    match now {
        Ok(a) if !(errors.is_error)(a) => next_failure(next, errors),
        // The owner now's error is the answer; only the next owner's own failure replaces it.
        _ => next.reply.as_ref().err().cloned(),
    }
}

/// Whether the next owner did not take a write the owner now took: its failure, or its refusal
/// for its server's state, as the failure to answer with. For a write whose owners' parts answer
/// apart (a split write's next parts).
pub(crate) fn next_failure(next: &PartReply<'_>, errors: &Errors) -> Option<BackendError> {
    match &next.reply {
        Err(e) => Some(e.clone()),
        Ok(b) if (errors.refuses)(b) => Some(BackendError::NextRefused {
            addr: next.server.to_owned(),
            reply: String::from_utf8_lossy(b.trim_ascii_end()).into_owned(),
        }),
        Ok(_) => None,
    }
}

/// [`not_taken`] for a replicated write whose part `next` (an index among `replies`) went to the
/// owner next, against the reply `chosen` to answer with; `None` when no part went there, or the
/// chosen reply is its own.
pub(crate) fn replicated_not_taken(
    replies: &[PartReply<'_>],
    chosen: Option<usize>,
    next: Option<usize>,
    errors: &Errors,
) -> Option<BackendError> {
    match (chosen, next) {
        (Some(i), Some(n)) if i != n => not_taken(&replies.get(i)?.reply, replies.get(n)?, errors),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    const ERRORS: Errors = Errors {
        is_error: |b| b.starts_with(b"-"),
        refuses: |b| b.starts_with(b"-OOM"),
    };

    fn part(reply: Reply) -> PartReply<'static> {
        PartReply {
            reply,
            server: "10.0.0.2:6379",
        }
    }

    #[test]
    fn a_write_the_next_owner_did_not_take_is_not_acknowledged() {
        let ok: Reply = Ok(Bytes::from_static(b"+OK\r\n"));
        let oom = part(Ok(Bytes::from_static(b"-OOM command not allowed\r\n")));
        let Some(BackendError::NextRefused { addr, reply }) = not_taken(&ok, &oom, &ERRORS) else {
            panic!("refused");
        };
        assert_eq!(
            (addr.as_str(), reply.as_str()),
            ("10.0.0.2:6379", "-OOM command not allowed")
        );
        // Unreachable: its own failure.
        let lost = part(Err(BackendError::NoServer));
        assert!(matches!(
            not_taken(&ok, &lost, &ERRORS),
            Some(BackendError::NoServer)
        ));
        // The owner's error is the answer; a reply that depends on the next owner's value is not a
        // refusal; the same reply on both is acknowledged.
        let owner_error: Reply = Ok(Bytes::from_static(b"-ERR wrong\r\n"));
        assert!(not_taken(&owner_error, &oom, &ERRORS).is_none());
        let wrongtype = part(Ok(Bytes::from_static(b"-WRONGTYPE\r\n")));
        assert!(not_taken(&ok, &wrongtype, &ERRORS).is_none());
        assert!(not_taken(&ok, &part(ok.clone()), &ERRORS).is_none());
        // A replicated write: the part sent to the owner next is the last; the chosen reply the
        // owner's, or the next owner's own when every replica failed.
        let replicated = [part(ok.clone()), part(ok.clone()), oom];
        assert!(replicated_not_taken(&replicated, Some(0), Some(2), &ERRORS).is_some());
        assert!(replicated_not_taken(&replicated, Some(2), Some(2), &ERRORS).is_none());
        assert!(replicated_not_taken(&replicated, Some(0), None, &ERRORS).is_none());
        // A split write's next part, read alone.
        assert!(next_failure(&replicated[2], &ERRORS).is_some());
        assert!(next_failure(&replicated[0], &ERRORS).is_none());
    }
}
