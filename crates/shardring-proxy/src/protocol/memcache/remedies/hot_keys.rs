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

use std::sync::Arc;

use bytes::Bytes;

use crate::hot_keys::HotKeys;
use crate::protocol::memcache::request::{Command, GetKind, Request};
use crate::protocol::memcache::route::Placer;
use crate::protocol::Answer;

/// A `get` of a top key, sent to its server: its reply fills the cache.
#[derive(Debug)]
pub(crate) struct HotFill {
    /// The pool's hot-key state.
    hot: Arc<HotKeys>,
    /// The key (a slice of the request's frame: no copy).
    key: Bytes,
    /// The cache's generation when the `get` was planned.
    generation: u64,
}

/// A write of a hot key: its reply invalidates the cache again.
#[derive(Debug)]
pub(crate) struct HotInvalidate {
    /// The pool's hot-key state.
    hot: Arc<HotKeys>,
    /// The key (its routing bytes, copied).
    key: Bytes,
}

/// What the hot-key rules decide for a `get` before it is placed.
pub(in crate::protocol::memcache) enum HotRead {
    /// Answer from the cache.
    Cached(Answer),
    /// Forward, filling the cache with the reply.
    Fill(HotFill),
    /// Forward as usual.
    Plain,
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
    let mut top = false;
    for k in keys {
        top = hot.observe(req.bytes(k));
    }
    let cacheable = top && *kind == GetKind::Get && keys.len() == 1 && !*more;
    let (Some(cache), true) = (hot.cache(), cacheable) else {
        return HotRead::Plain;
    };
    let key = &keys[0];
    if let Some(reply) = cache.get(req.bytes(key), hot.now_ms()) {
        ctx.stats.hot_cache_hits.inc();
        return HotRead::Cached(Answer::Bytes(reply));
    }
    HotRead::Fill(HotFill {
        hot: Arc::clone(hot),
        key: req.frame.slice(key.clone()),
        generation: cache.generation(),
    })
}

/// Counts a one-key command's key and, when it may be cached, invalidates it now and gives what
/// invalidates it again when the reply arrives.
pub(in crate::protocol::memcache) fn write(key: &[u8], ctx: &Placer<'_>) -> Option<HotInvalidate> {
    let hot = ctx.hot?;
    let top = hot.observe(key);
    let cache = hot.cache()?;
    if !(top || cache.holds(key)) {
        return None;
    }
    cache.invalidate(key);
    ctx.stats.hot_cache_invalidations.inc();
    Some(HotInvalidate {
        hot: Arc::clone(hot),
        key: Bytes::copy_from_slice(key),
    })
}

/// `flush_all`: forget every cached reply.
pub(in crate::protocol::memcache) fn flush(ctx: &Placer<'_>) {
    if let Some(cache) = ctx.hot.and_then(|h| h.cache()) {
        cache.clear();
    }
}

impl HotFill {
    /// Caches a `VALUE` reply (a hit) if the key is still a top key and no write intervened.
    pub(in crate::protocol::memcache) fn fill(self, reply: &Bytes) {
        if !reply.starts_with(b"VALUE ") || !self.hot.is_top(&self.key) {
            return;
        }
        if let Some(cache) = self.hot.cache() {
            // Copies: the key and reply are slices of connection buffers, which the cache must not keep
            // alive (its byte bound counts only what it holds).
            let key = Bytes::copy_from_slice(&self.key);
            let reply = Bytes::copy_from_slice(reply);
            if cache.fill(key, reply, self.generation, self.hot.now_ms()) {
                self.hot.stats().hot_cache_fills.inc();
            }
        }
    }
}

impl HotInvalidate {
    /// Invalidates again: the write has reached its server.
    pub(in crate::protocol::memcache) fn done(self) {
        if let Some(cache) = self.hot.cache() {
            cache.invalidate(&self.key);
        }
    }
}
