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

use crate::hot_keys::HotKeys;
use crate::protocol::{Answer, PlanContext};

/// A `GET` of a top key, sent to its server: its reply fills the cache.
#[derive(Debug)]
pub(crate) struct HotFill {
    /// The pool's hot-key state.
    hot: Arc<HotKeys>,
    /// The key.
    key: Bytes,
    /// The cache's generation when the `GET` was planned.
    generation: u64,
}

/// A write of hot keys: its reply invalidates them again.
#[derive(Debug)]
pub(crate) struct HotInvalidate {
    /// The pool's hot-key state.
    hot: Arc<HotKeys>,
    /// The keys.
    keys: Vec<Bytes>,
}

/// What the hot-key rules decide for a `GET`.
pub(crate) enum HotRead {
    /// Answer from the cache.
    Cached(Answer),
    /// Forward, filling the cache with the reply.
    Fill(HotFill),
    /// Forward as usual.
    Plain,
}

/// Counts a `GET`'s key and, for a top key, answers it from the cache or arranges its fill.
pub(crate) fn get(hot: &Arc<HotKeys>, key: &[u8], ctx: &PlanContext<'_>) -> HotRead {
    let top = hot.observe(key);
    let (Some(cache), true) = (hot.cache(), top) else {
        return HotRead::Plain;
    };
    if let Some(reply) = cache.get(key, hot.now_ms()) {
        ctx.stats.hot_cache_hits.inc();
        return HotRead::Cached(Answer::Bytes(reply));
    }
    HotRead::Fill(HotFill {
        hot: Arc::clone(hot),
        key: Bytes::copy_from_slice(key),
        generation: cache.generation(),
    })
}

/// Counts a read's keys.
pub(crate) fn read<'k>(hot: &HotKeys, keys: impl Iterator<Item = &'k [u8]>) {
    for k in keys {
        hot.observe(k);
    }
}

/// Counts a write's keys and invalidates those that may be cached; gives what invalidates them again
/// when the reply arrives (`None` when none may be).
pub(crate) fn write<'k>(
    hot: &Arc<HotKeys>,
    keys: impl Iterator<Item = &'k [u8]>,
    ctx: &PlanContext<'_>,
) -> Option<HotInvalidate> {
    let mut held = Vec::new();
    for k in keys {
        let top = hot.observe(k);
        if let Some(cache) = hot.cache() {
            if top || cache.holds(k) {
                cache.invalidate(k);
                ctx.stats.hot_cache_invalidations.inc();
                held.push(Bytes::copy_from_slice(k));
            }
        }
    }
    (!held.is_empty()).then(|| HotInvalidate {
        hot: Arc::clone(hot),
        keys: held,
    })
}

/// Invalidates `keys` now (a transaction's writes, at `EXEC`); gives what invalidates them again when
/// the reply arrives.
pub(crate) fn invalidate_all(hot: &Arc<HotKeys>, keys: Vec<Bytes>) -> Option<HotInvalidate> {
    let cache = hot.cache()?;
    for k in &keys {
        cache.invalidate(k);
    }
    (!keys.is_empty()).then(|| HotInvalidate {
        hot: Arc::clone(hot),
        keys,
    })
}

impl HotFill {
    /// Caches a bulk-string reply (a hit) if the key is still a top key and no write intervened.
    pub(crate) fn fill(self, reply: &Bytes) {
        if !reply.starts_with(b"$") || reply.starts_with(b"$-1") || !self.hot.is_top(&self.key) {
            return;
        }
        if let Some(cache) = self.hot.cache() {
            // A copy: the reply is a slice of a connection's buffer, which the cache must not keep
            // alive (its byte bound counts only what it holds).
            let reply = Bytes::copy_from_slice(reply);
            if cache.fill(self.key, reply, self.generation, self.hot.now_ms()) {
                self.hot.stats().hot_cache_fills.inc();
            }
        }
    }
}

impl HotInvalidate {
    /// Invalidates again: the write has reached its server.
    pub(crate) fn done(self) {
        if let Some(cache) = self.hot.cache() {
            for k in &self.keys {
                cache.invalidate(k);
            }
        }
    }
}
