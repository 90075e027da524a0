//! Dual writes on the memcached protocol, while a pool has a next membership (`--next-config`,
//! etcd's `next/`): a write of a key whose owner changes goes to its owner now and to its owner
//! next in one pipelined round trip, so `shardring migrate` can copy the key without losing the
//! write; reads stay on the owner now.
//!
//! - Writes are the replicated pools' ([`super::replicas::is_write`]): set/add/replace/append/
//!   prepend/cas, delete, incr/decr, touch, `ms`, `md`, `ma`. `gat`/`gats` change a TTL while
//!   reading: the read stays on the owner now, and each of their keys that moves is touched on its
//!   next owner with the same exptime ([`touches`], sent beside the read without waiting: a key the
//!   next owner has no copy of yet gets the new TTL from the copy, which reads it from the owner
//!   now). `mg … T` is not dual-written.
//! - The client gets the owner now's reply, exactly as without a next membership (`noreply` and
//!   quiet meta commands stay quiet), unless the next owner did not take the write (it could not be
//!   reached, or answered `SERVER_ERROR` where the owner now stored it: `crate::protocol::planned`):
//!   then the write is not acknowledged (that failure is the answer), since once the copy is done
//!   nothing would bring it there and the cut-over would lose it; `dual_writes` counts the writes, `dual_write_disagreements`
//!   those whose next owner answered with another status (an `append`, `incr` or `cas` of a key
//!   it has no copy of yet answers `NOT_STORED`/`NOT_FOUND`: expected before the copy, and why the
//!   copy checks the key's CAS after writing it).
//! - With replicas, the next owner is added to the key's replica list when it is not on it, and the
//!   write is acknowledged only when it took it, as above; a classic `cas` goes to the replicas, then
//!   on to the next owner as a `set` once stored (see [`cas_as_set`]).

use bytes::{Bytes, BytesMut};

use crate::protocol::memcache::request::{Command, GetKind, Request};
use crate::protocol::memcache::response::status_code;
use crate::protocol::planned;
use crate::protocol::route::Placer;
use crate::protocol::PartReply;

/// For a `gat`/`gats` while a planned change is under way: `touch <key> <exptime>` for each of its
/// keys whose owner changes, with that next owner; empty for anything else.
pub(in crate::protocol::memcache) fn touches(
    req: &Request,
    ctx: &Placer<'_>,
) -> Vec<(usize, Bytes)> {
    let Command::Get {
        kind: GetKind::Gat | GetKind::Gats,
        exptime: Some(exptime),
        keys,
        ..
    } = &req.command
    else {
        return Vec::new();
    };
    if !ctx.changing() {
        return Vec::new();
    }
    let exptime = req.bytes(exptime);
    keys.iter()
        .filter_map(|k| {
            let key = req.bytes(k);
            let next = ctx.next_owner(key, ctx.server_for(key))?;
            let mut frame = BytesMut::with_capacity(key.len() + exptime.len() + 9);
            frame.extend_from_slice(b"touch ");
            frame.extend_from_slice(key);
            frame.extend_from_slice(b" ");
            frame.extend_from_slice(exptime);
            frame.extend_from_slice(b"\r\n");
            Some((next, frame.freeze()))
        })
        .collect()
}

/// How a dual write's replies read (`crate::protocol::planned`): a `SERVER_ERROR` from the next
/// owner (out of memory, an item over its size limit) refuses a write the owner now stored.
pub(in crate::protocol::memcache) const ERRORS: planned::Errors = planned::Errors {
    is_error: |b| {
        b.starts_with(b"SERVER_ERROR") || b.starts_with(b"CLIENT_ERROR") || b.starts_with(b"ERROR")
    },
    refuses: |b| b.starts_with(b"SERVER_ERROR"),
};

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

/// A `cas` of a key whose owner changes cannot be dual-written as it is: its unique is the owner
/// now's, which the next owner does not share (it would answer `EXISTS` or `NOT_FOUND`, and miss a
/// write the owner took). So it goes to the owner now alone, and only when that one answers
/// `STORED` is the value sent on to the next owner as this `set` (`cas key flags exptime bytes
/// unique` → `set key flags exptime bytes`, the data unchanged); the client's later requests wait
/// for it, so none overtakes it. `None` when `frame` (as forwarded, without `noreply`) is not a
/// classic `cas`. A meta `ms … C<cas>` is dual-written as it is (the next owner refuses it).
pub(in crate::protocol::memcache) fn cas_as_set(frame: &[u8]) -> Option<bytes::Bytes> {
    let rest = frame.strip_prefix(b"cas ")?;
    let end = memchr::memmem::find(rest, b"\r\n")?;
    let line = std::str::from_utf8(&rest[..end]).ok()?;
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    let [key, flags, exptime, bytes, _unique] = fields.as_slice() else {
        return None;
    };
    let mut out = format!("set {key} {flags} {exptime} {bytes}").into_bytes();
    out.extend_from_slice(&rest[end..]);
    Some(bytes::Bytes::from(out))
}

/// Whether the owner now took a `cas` (so its value goes on to the next owner).
pub(in crate::protocol::memcache) fn cas_stored(reply: &crate::protocol::Reply) -> bool {
    matches!(reply, Ok(b) if &b[..] == b"STORED\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cas_goes_on_as_a_set_of_the_same_value() {
        assert_eq!(
            cas_as_set(b"cas k 5 100 3 12345\r\nabc\r\n").as_deref(),
            Some(&b"set k 5 100 3\r\nabc\r\n"[..])
        );
        assert_eq!(cas_as_set(b"set k 5 100 3\r\nabc\r\n"), None);
        assert_eq!(cas_as_set(b"cas k 5 100\r\n"), None);
    }
}
