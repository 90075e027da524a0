//! Dual writes on the memcached protocol, while a pool has a next membership (`--next-config`,
//! etcd's `next/`): a write of a key whose owner changes goes to its owner now and to its owner
//! next in one pipelined round trip, so `shardring migrate` can copy the key without losing the
//! write; reads stay on the owner now.
//!
//! - Writes are the replicated pools' ([`super::replicas::is_write`]): set/add/replace/append/
//!   prepend/cas, delete, incr/decr, touch, `ms`, `md`, `ma`. `gat`/`gats` and `mg … T` change a
//!   TTL while reading and are not dual-written: the copy reads the TTL from the owner now.
//! - The client gets the owner now's reply, exactly as without a next membership (`noreply` and
//!   quiet meta commands stay quiet); `dual_writes` counts the writes, `dual_write_disagreements`
//!   those whose next owner answered with another status (an `append`, `incr` or `cas` of a key
//!   it has no copy of yet answers `NOT_STORED`/`NOT_FOUND`: expected before the copy, and why the
//!   copy checks the key's CAS after writing it).
//! - With replicas, the next owner is added to the key's replica list when it is not on it.

use crate::protocol::memcache::response::status_code;
use crate::protocol::PartReply;

/// Whether the next owner's reply (the second) has another status than the owner's (the first), or
/// either failed.
pub(in crate::protocol::memcache) fn disagree(replies: &[PartReply<'_>]) -> bool {
    match replies {
        [now, next] => match (&now.reply, &next.reply) {
            (Ok(a), Ok(b)) => status_code(a) != status_code(b),
            _ => true,
        },
        _ => true,
    }
}
