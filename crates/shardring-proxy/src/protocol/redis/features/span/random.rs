//! `RANDOMKEY` across the servers: every server is asked at once, and the answer is one of the
//! non-empty servers' keys, picked at random; nil only when every server is empty.
//!
//! Each non-empty server is as likely as any other, whatever its size, as Redis picks among its
//! own keys: a key of a small server is likelier than one of a large server. Weighting by `DBSIZE`
//! would need a round more, and `RANDOMKEY`'s users (sampling, a quick look at a keyspace) rarely
//! need the weights. A server that fails only matters when no other server has a key: the answer
//! is then its error, since a nil would claim the pool is empty.

use bytes::Bytes;

use super::{got, Got};
use crate::protocol::redis::merge::failure;
use crate::protocol::PartReply;

/// The answer to `RANDOMKEY` from every server's reply; `pick` chooses among the keys.
pub(super) fn merge(replies: &[PartReply<'_>], pick: u64) -> Bytes {
    let mut keys: Vec<&[u8]> = Vec::with_capacity(replies.len());
    let mut nil: Option<&[u8]> = None;
    let mut error: Option<Bytes> = None;
    for reply in replies {
        match got(reply) {
            // `$-1` in RESP2, `_` in RESP3: kept as the server wrote it, for the client's protocol.
            Got::Reply(bytes) if bytes == b"$-1\r\n" || bytes == b"_\r\n" => {
                nil.get_or_insert(bytes);
            }
            Got::Reply(bytes) if bytes.first() == Some(&b'$') => keys.push(bytes),
            Got::Reply(_) => {
                error.get_or_insert_with(|| {
                    failure(&format!(
                        "unexpected reply from server {} to RANDOMKEY",
                        reply.server
                    ))
                });
            }
            Got::Error(e) => {
                error.get_or_insert(e);
            }
        }
    }
    if !keys.is_empty() {
        // At most the pool's server count: fits a u64 and back.
        let i = (pick % keys.len() as u64) as usize;
        return Bytes::copy_from_slice(keys[i]);
    }
    match (error, nil) {
        (Some(e), _) => e,
        (None, Some(nil)) => Bytes::copy_from_slice(nil),
        (None, None) => failure("no server answered RANDOMKEY"),
    }
}
