//! `KEYS pattern` across the servers: every server's array, concatenated in server order, under a
//! guard on the answer's size.
//!
//! The guard is the pool's `--redis-keys-limit` (by default a million keys): the proxy holds every
//! server's reply before it answers, and a client's `KEYS *` over a large pool would otherwise cost
//! the proxy the whole keyspace in memory, once in the replies and once in the answer. Past it the
//! answer is an error naming the flag and `SCAN`, which pages through the same keys a server at a
//! time. It bounds the proxy's cost, not the servers': each server runs its `KEYS` as Redis always
//! does, blocking while it walks its keyspace.
//!
//! A key lives on one server, so the concatenation holds each key once, as Redis's `KEYS` does
//! (only a key written to two servers outside the proxy's placement, while its owner was ejected,
//! can appear twice). In a pool whose keys have replicas (`--replicas`), each key is on several
//! servers: the answer then keeps each key's first copy only, and the guard counts the keys
//! before they are told apart.

use std::collections::HashSet;

use bytes::{BufMut, Bytes, BytesMut};
use shardring_resp::{elements, ReplyLimits};

use super::{array_header, got, Got};
use crate::protocol::redis::merge::failure;
use crate::protocol::PartReply;

/// A `KEYS` between its round and its answer.
#[derive(Debug)]
pub(crate) struct Listing {
    /// The most keys the answer may hold.
    pub(super) limit: u64,
    /// Whether each key is on several servers (`--replicas`): its copies are left out.
    pub(super) replicated: bool,
    /// The reply framer's limits, to read the servers' arrays when copies are left out.
    pub(super) limits: ReplyLimits,
}

/// The answer to `KEYS` from every server's reply: their keys in one array, or the first server's
/// error, or the guard's when there are more than the limit.
pub(super) fn merge(listing: &Listing, replies: &[PartReply<'_>]) -> Bytes {
    let limit = listing.limit;
    // Each server's whole array, and where its elements begin.
    let mut arrays: Vec<(&[u8], usize)> = Vec::with_capacity(replies.len());
    let mut total: u64 = 0;
    for reply in replies {
        let bytes = match got(reply) {
            Got::Reply(bytes) => bytes,
            Got::Error(e) => return e,
        };
        let Some((count, start)) = array_header(bytes) else {
            return failure(&format!(
                "unexpected reply from server {} to KEYS",
                reply.server
            ));
        };
        total = total.saturating_add(count);
        arrays.push((bytes, start));
    }
    if total > limit {
        return failure(&format!(
            "KEYS would answer {total} keys, over this pool's limit of {limit} \
             (--redis-keys-limit): use SCAN"
        ));
    }
    if listing.replicated {
        return distinct(&arrays, listing.limits);
    }
    let size = arrays.iter().map(|(a, _)| a.len()).sum::<usize>() + 24;
    let mut out = BytesMut::with_capacity(size);
    put_count(&mut out, total);
    for (a, start) in arrays {
        out.put_slice(&a[start..]);
    }
    out.freeze()
}

/// `*<count>\r\n`.
fn put_count(out: &mut BytesMut, count: u64) {
    out.put_u8(b'*');
    out.put_slice(count.to_string().as_bytes());
    out.put_slice(b"\r\n");
}

/// The keys of the servers' `arrays`, each once (its first copy), in server order.
fn distinct(arrays: &[(&[u8], usize)], limits: ReplyLimits) -> Bytes {
    let mut seen: HashSet<&[u8]> = HashSet::new();
    let mut kept: Vec<&[u8]> = Vec::new();
    for (array, _) in arrays {
        // Read before: each is a whole array whose header was read.
        for range in elements(array, limits).unwrap_or_default() {
            // A key's encoding (`$3\r\nabc\r\n`) is the same wherever it comes from.
            let key = &array[range];
            if seen.insert(key) {
                kept.push(key);
            }
        }
    }
    let mut out = BytesMut::with_capacity(kept.iter().map(|k| k.len()).sum::<usize>() + 24);
    put_count(&mut out, kept.len() as u64);
    for k in kept {
        out.put_slice(k);
    }
    out.freeze()
}
