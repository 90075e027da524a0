//! Dual writes on the Redis protocol, while a pool has a next membership (`--next-config`, etcd's
//! `next/`): a write of keys whose owner changes goes to their owner now and to their owner next,
//! so `shardring migrate` can copy the keys without losing the write; reads stay on the owner now.
//!
//! - Writes are the commands redis-server flags `write`, and scripts (`writes.rs`).
//! - A one-server command (one key, or keys sharing a hash tag): both owners in one pipelined round
//!   trip; the client gets the owner now's reply, or a failure when the next owner did not take the
//!   write (it could not be reached, or refused it for its server's state: `-OOM`, `-READONLY`,
//!   `-MOVED`…, `crate::protocol::planned`): a write it did not take would be lost at the cut-over,
//!   so it is not acknowledged; `dual_writes` counts it and
//!   `dual_write_disagreements` a next owner that answered otherwise (an `INCR` of a key it has no
//!   copy of yet answers 1 where the owner says 6: expected before the copy, which then replaces the
//!   partial value from the owner now and verifies it).
//! - A split write (`MSET`, `DEL`, `UNLINK`): each key whose owner changes is also written on its
//!   next owner, split by server, as further parts of the same round (the client's answer merges
//!   the owners' parts only): counted in `dual_writes`, and a next owner's part that failed or
//!   was refused in `dual_write_disagreements`; one that failed or refused the write for its
//!   server's state fails the command, as above.
//! - With replicas (`--replicas`), a write goes to every live replica now and to the owner next when
//!   it is not one of them, with the same rule (`replicas.rs`).
//! - Not dual-written, so refused with `-TRYAGAIN` while the change is under way when they write a
//!   key it moves (they would be lost at the cut-over): a command whose keys have different next
//!   owners (they share a server now but not next: without a hash tag; or, onto a Redis Cluster,
//!   different slots), transactions and blocking
//!   commands (they run on the client's own connection to one server: `transaction.rs`). The same
//!   commands on keys that stay are served.

use std::sync::Arc;

/// The answer to a write whose keys share a server now but not next, while a planned change is
/// under way: it cannot be dual-written as one command.
pub(crate) const APART: &[u8] = b"-TRYAGAIN a planned membership change moves this command's keys apart; retry once it is over, or give them one hash tag\r\n";

use crate::metrics::PoolStats;
use crate::protocol::planned::{self, next_failure, not_taken};
use crate::protocol::route::Placer;
use crate::protocol::{Answer, PartReply};

/// How a dual write's replies read (`crate::protocol::planned`): an error reply whose code says the
/// server would take no write like it now (out of memory, a replica, a cluster node that does not
/// serve the slot or is down, loading, busy, persistence failing, a user without the right, an
/// `EVALSHA` of a script it has not cached) refuses it; others (`-WRONGTYPE`, `-ERR value is not an
/// integer`) depend on the value the next owner holds before the copy replaces it.
pub(crate) const ERRORS: planned::Errors = planned::Errors {
    is_error: |b| b.starts_with(b"-"),
    refuses: |b| {
        const CODES: [&[u8]; 14] = [
            b"-OOM",
            b"-CROSSSLOT",
            b"-READONLY",
            b"-MOVED",
            b"-ASK",
            b"-TRYAGAIN",
            b"-CLUSTERDOWN",
            b"-LOADING",
            b"-MASTERDOWN",
            b"-BUSY",
            b"-NOREPLICAS",
            b"-MISCONF",
            b"-NOPERM",
            b"-NOSCRIPT",
        ];
        CODES
            .iter()
            .any(|c| b.starts_with(c) && matches!(b.get(c.len()), Some(b' ' | b'\r') | None))
    },
};

/// The owner next of a one-server command's keys (`now`: their owner now), when it differs from
/// `now` and is the same for every key (and, when the next membership is a Redis Cluster, so is
/// their slot: a node refuses keys of two slots with `-CROSSSLOT`); `None` otherwise (no dual
/// write).
pub(crate) fn next_owner<'k>(
    mut keys: impl Iterator<Item = &'k [u8]>,
    now: Option<usize>,
    ctx: &Placer<'_>,
) -> Option<usize> {
    let key = keys.next()?;
    let first = ctx.next_owner(key, now)?;
    let slot = ctx.next_by_slot().then(|| shardring_resp::key_slot(key));
    keys.all(|k| {
        ctx.next_owner(k, now) == Some(first)
            && slot.is_none_or(|s| shardring_resp::key_slot(k) == s)
    })
    .then_some(first)
}

/// A dual write's answer: the owner now's reply (the first part's).
pub(crate) fn answer(stats: &Arc<PoolStats>, mut replies: Vec<PartReply<'_>>) -> Answer {
    stats.dual_writes.inc();
    let disagree = match replies.as_slice() {
        [now, next] => match (&now.reply, &next.reply) {
            (Ok(a), Ok(b)) => a != b,
            _ => true,
        },
        _ => true,
    };
    if disagree {
        stats.dual_write_disagreements.inc();
    }
    if replies.is_empty() {
        return Answer::Failed(crate::error::BackendError::NoServer);
    }
    // A write the next owner did not take is not acknowledged: once the copy is done, nothing
    // would bring it there, and the cut-over would lose it. The client sees the failure and
    // retries, as after any failed write.
    if let [now, next] = replies.as_slice() {
        if let Some(e) = not_taken(&now.reply, next, &ERRORS) {
            return Answer::Failed(e);
        }
    }
    match replies.swap_remove(0).reply {
        Ok(b) => Answer::Bytes(b),
        Err(e) => Answer::Failed(e),
    }
}

/// Counts a split write's next-owner parts: one dual write, and a disagreement when one of them
/// failed or was refused. The failure of the first part that failed or refused the write for its
/// server's state, if one did: the write is then not acknowledged (see [`answer`]).
pub(crate) fn count_split(
    stats: &PoolStats,
    next: &[PartReply<'_>],
) -> Option<crate::error::BackendError> {
    stats.dual_writes.inc();
    if next
        .iter()
        .any(|r| !matches!(&r.reply, Ok(b) if !b.starts_with(b"-")))
    {
        stats.dual_write_disagreements.inc();
    }
    next.iter().find_map(|r| next_failure(r, &ERRORS))
}
