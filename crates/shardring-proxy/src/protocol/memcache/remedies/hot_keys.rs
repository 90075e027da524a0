//! Hot keys on the memcached protocol: which requests count, which are served from the hot-key cache,
//! and which invalidate it.
//!
//! - Every keyed request counts its key (every key of a multi-get).
//! - A `get` of exactly one key that is one of the pool's top keys is answered from the cache when the
//!   cache holds a reply filled at most the TTL ago; otherwise it goes to its server as usual and a
//!   `VALUE` reply fills the cache (misses, `gets`, `gat`, `mg` and multi-gets are never cached: a
//!   miss is cheap to repeat, and CAS values or touched TTLs must come from the server).
//! - Any other command on a key that is top or cached (set, delete, incr, touch, cas, the meta
//!   commands, …) removes the entry when it is planned and again when its reply arrives; `flush_all`
//!   clears the cache.
//!
//! What a client may see: a value up to the TTL old (plus one millisecond of clock) when the key was
//! written by another client of the servers (not through this proxy); a write through this proxy is
//! seen by the next read through it.

use crate::hot_keys::requests::{self, HotRead as Decided};
pub(crate) use crate::hot_keys::requests::{HotFill, HotInvalidate};
use crate::protocol::memcache::request::{Command, GetKind, Request};
use crate::protocol::route::Placer;
use crate::protocol::Answer;

/// What the hot-key rules decide for a `get` before it is placed.
pub(in crate::protocol::memcache) enum HotRead {
    /// Answer from the cache.
    Cached(Answer),
    /// Forward, filling the cache with the reply.
    Fill(HotFill),
    /// Forward as usual.
    Plain,
}

/// A `VALUE` reply: a hit, which may be cached.
fn hit(reply: &[u8]) -> bool {
    reply.starts_with(b"VALUE ")
}

/// Counts a retrieval's keys and, for a one-key `get` of a top key, answers it from the cache or
/// arranges its fill.
pub(in crate::protocol::memcache) fn read(req: &Request, ctx: &Placer<'_>) -> HotRead {
    let Some(hot) = ctx.hot else {
        return HotRead::Plain;
    };
    let Command::Get {
        kind, keys, more, ..
    } = &req.command
    else {
        return HotRead::Plain;
    };
    let cacheable = *kind == GetKind::Get && keys.len() == 1 && !*more;
    if !cacheable {
        for k in keys {
            hot.observe(req.bytes(k));
        }
        return HotRead::Plain;
    }
    match requests::read(hot, req.bytes(&keys[0]), hit) {
        Decided::Cached(reply) => HotRead::Cached(Answer::Bytes(reply)),
        Decided::Fill(fill) => HotRead::Fill(fill),
        Decided::Plain => HotRead::Plain,
    }
}

/// Counts a one-key command's key and, when it may be cached, invalidates it now and gives what
/// invalidates it again when the reply arrives.
pub(in crate::protocol::memcache) fn write(key: &[u8], ctx: &Placer<'_>) -> Option<HotInvalidate> {
    requests::write(ctx.hot?, [key])
}

/// `flush_all`: forget every cached reply.
pub(in crate::protocol::memcache) fn flush(ctx: &Placer<'_>) {
    if let Some(cache) = ctx.hot.and_then(|h| h.cache()) {
        cache.clear();
    }
}
