//! Hot keys on the Redis protocol (`--hot-keys K`, `--hot-cache-ttl MS`): which requests count, which
//! are served from the hot-key cache, and which invalidate it.
//!
//! - Every keyed request counts its keys (each key of an `MGET`).
//! - A `GET` of a top key is answered from the cache when the cache holds a reply filled at most the
//!   TTL ago; otherwise it goes to its server and a bulk-string reply fills the cache (a nil is not
//!   cached: a miss is cheap to repeat; `GETEX`, `GETDEL` and the other reads are not cached). A bulk
//!   string is written alike in RESP2 and RESP3, so clients of both share the cache.
//! - Every write command (the ones redis-server flags `write`, and scripts: `writes.rs`) on a key
//!   that is top or cached removes the entry when it is planned and again when its reply arrives;
//!   so do `MSET`, `DEL` and `UNLINK` for each of their keys, and `EXEC` for the keys of the writes it
//!   queued.
//!
//! What a client may see: a value up to the TTL old when the key was written by another client of the
//! servers (not through this proxy); a write through this proxy is seen by the next read through it.

use std::sync::Arc;

use bytes::Bytes;

use crate::hot_keys::requests::{self, HotRead as Decided};
pub(crate) use crate::hot_keys::requests::{HotFill, HotInvalidate};
use crate::hot_keys::HotKeys;
use crate::protocol::Answer;

/// What the hot-key rules decide for a `GET`.
pub(crate) enum HotRead {
    /// Answer from the cache.
    Cached(Answer),
    /// Forward, filling the cache with the reply.
    Fill(HotFill),
    /// Forward as usual.
    Plain,
}

/// A bulk string that is not nil: a hit, which may be cached.
fn hit(reply: &[u8]) -> bool {
    reply.starts_with(b"$") && !reply.starts_with(b"$-1")
}

/// Counts a `GET`'s key and, for a top key, answers it from the cache or arranges its fill.
pub(crate) fn get(hot: &Arc<HotKeys>, key: &[u8]) -> HotRead {
    match requests::read(hot, key, hit) {
        Decided::Cached(reply) => HotRead::Cached(Answer::Bytes(reply)),
        Decided::Fill(fill) => HotRead::Fill(fill),
        Decided::Plain => HotRead::Plain,
    }
}

/// Counts a read's keys.
pub(crate) fn read<'k>(hot: &HotKeys, keys: impl Iterator<Item = &'k [u8]>) {
    for k in keys {
        hot.observe(k);
    }
}

/// Counts a write's keys and invalidates those that may be cached; gives what invalidates them again
/// when the reply arrives.
pub(crate) fn write<'k>(
    hot: &Arc<HotKeys>,
    keys: impl Iterator<Item = &'k [u8]>,
) -> Option<HotInvalidate> {
    requests::write(hot, keys)
}

/// Invalidates a transaction's written keys now, at `EXEC`; gives what invalidates them again when
/// its reply arrives.
pub(crate) fn invalidate_all(hot: &Arc<HotKeys>, keys: Vec<Bytes>) -> Option<HotInvalidate> {
    requests::invalidate(hot, keys)
}
