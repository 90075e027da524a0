//! The rules of replicated keys, for every protocol. A write goes to every live replica of its key
//! at once ([`super::route::Route::replicas`]), and the client gets one answer ([`chosen`]); a read
//! goes to the first live replica, and on to the next while a reply says to ([`Untried`]). The
//! protocols differ only in what a server failure looks like and which part of a reply they
//! compare; the rules are one.

use super::{PartReply, Reply};
use crate::metrics::PoolStats;

/// The replicas a replicated read has not tried yet, in order.
#[derive(Debug, Default)]
pub(crate) struct Untried(std::vec::IntoIter<usize>);

impl Untried {
    /// A read of a key held by `servers` (its live replicas, owner first): the one to send to now,
    /// and the rest; `None` when there is none.
    pub(crate) fn start(servers: Vec<usize>) -> Option<(usize, Untried)> {
        let mut rest = servers.into_iter();
        let first = rest.next()?;
        Some((first, Untried(rest)))
    }

    /// After a reply: the next replica to try when `retry` (the protocol's reading of the reply: a
    /// server failure, or a miss the pool retries), counted in `replica_failovers`; `None` when the
    /// reply answers (or no replica is left).
    pub(crate) fn next(&mut self, retry: bool, stats: &PoolStats) -> Option<usize> {
        if !retry {
            return None;
        }
        let next = self.0.next()?;
        stats.replica_failovers.inc();
        Some(next)
    }
}

/// Which of a replicated write's replies the client gets, and whether the replicas disagreed.
///
/// `seen` reads a reply as the protocol compares it: `None` for a server failure (the connection
/// failed, memcached's `SERVER_ERROR`, Redis's `-LOADING`), else what must be equal on every replica
/// (memcached's status, Redis's whole reply). The client gets the first reply that is not a failure
/// (the owner's when it answered), else the first; `None` when there are no replies. The replicas
/// disagree when one reply is seen otherwise than the first (a failed replica beside one that took
/// the write, or replicas whose values had diverged: `INCR` answering 5 on one and 4 on another).
pub(crate) fn chosen(
    replies: &[PartReply<'_>],
    seen: impl for<'r> Fn(&'r Reply) -> Option<&'r [u8]>,
) -> (Option<usize>, bool) {
    let seen: Vec<Option<&[u8]>> = replies.iter().map(|r| seen(&r.reply)).collect();
    let disagree = seen.iter().any(|s| Some(s) != seen.first());
    if replies.is_empty() {
        return (None, disagree);
    }
    let chosen = seen.iter().position(Option::is_some).unwrap_or(0);
    (Some(chosen), disagree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BackendError;
    use bytes::Bytes;

    fn replies(of: &[Reply]) -> Vec<PartReply<'static>> {
        of.iter()
            .map(|r| PartReply {
                reply: r.clone(),
                server: "s",
            })
            .collect()
    }

    fn seen(r: &Reply) -> Option<&[u8]> {
        r.as_ref()
            .ok()
            .filter(|b| !b.starts_with(b"-LOADING"))
            .map(|b| &b[..])
    }

    #[test]
    fn the_first_reply_not_a_failure_wins_and_a_difference_is_a_disagreement() {
        let ok = Ok(Bytes::from_static(b"+OK\r\n"));
        let five = Ok(Bytes::from_static(b":5\r\n"));
        let loading = Ok(Bytes::from_static(b"-LOADING\r\n"));
        let down = Err(BackendError::NoServer);
        // The replies, and (which one the client gets, whether the replicas disagree).
        type Case<'a> = (&'a [Reply], (Option<usize>, bool));
        let cases: [Case<'_>; 6] = [
            (&[], (None, false)),
            (&[ok.clone(), ok.clone()], (Some(0), false)),
            (&[down.clone(), ok.clone()], (Some(1), true)),
            (&[loading.clone(), ok.clone(), ok.clone()], (Some(1), true)),
            (&[ok.clone(), five.clone()], (Some(0), true)),
            (&[down.clone(), loading.clone()], (Some(0), false)),
        ];
        for (of, want) in cases {
            assert_eq!(chosen(&replies(of), seen), want, "{of:?}");
        }
    }
}
