//! What a request does with the hot keys, whatever its protocol: a read of one key answered from the
//! cache or filling it, a write invalidating its keys now and again when answered. The protocols say
//! which of their requests are which, and which replies are hits (`protocol/memcache/remedies/
//! hot_keys.rs`, `protocol/redis/features/hot_keys.rs`).

use std::sync::Arc;

use bytes::Bytes;

use super::HotKeys;

/// What the cache decides for a one-key read.
pub(crate) enum HotRead {
    /// Answer with this reply, from the cache.
    Cached(Bytes),
    /// Send it, and let its reply fill the cache.
    Fill(HotFill),
    /// Send it as usual.
    Plain,
}

/// A read of a top key, sent to its server: its reply fills the cache when it is a hit.
#[derive(Debug)]
pub(crate) struct HotFill {
    /// The pool's hot-key state.
    hot: Arc<HotKeys>,
    /// The key (copied: the cache must not keep a connection's buffer alive).
    key: Bytes,
    /// The cache's generation when the read was planned.
    generation: u64,
    /// Whether a reply is a hit of the protocol (`VALUE …`, a bulk string).
    hit: fn(&[u8]) -> bool,
}

/// A write of keys that may be cached: its reply invalidates them again.
#[derive(Debug)]
pub(crate) struct HotInvalidate {
    /// The pool's hot-key state.
    hot: Arc<HotKeys>,
    /// The keys.
    keys: Vec<Bytes>,
}

/// Counts a one-key read of `key` and, for a top key, answers it from the cache (counted in
/// `hot_cache_hits`) or arranges its fill with the replies `hit` accepts.
pub(crate) fn read(hot: &Arc<HotKeys>, key: &[u8], hit: fn(&[u8]) -> bool) -> HotRead {
    let top = hot.observe(key);
    let (Some(cache), true) = (hot.cache(), top) else {
        return HotRead::Plain;
    };
    if let Some(reply) = cache.get(key, hot.now_ms()) {
        hot.stats().hot_cache_hits.inc();
        return HotRead::Cached(reply);
    }
    HotRead::Fill(HotFill {
        hot: Arc::clone(hot),
        key: Bytes::copy_from_slice(key),
        generation: cache.generation(),
        hit,
    })
}

/// Counts a write's keys and invalidates those that are top or cached (each counted in
/// `hot_cache_invalidations`); gives what invalidates them again when the reply arrives, `None` when
/// none may be cached.
pub(crate) fn write<'k>(
    hot: &Arc<HotKeys>,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Option<HotInvalidate> {
    let mut held = Vec::new();
    for k in keys {
        let top = hot.observe(k);
        if let Some(cache) = hot.cache() {
            if top || cache.holds(k) {
                cache.invalidate(k);
                hot.stats().hot_cache_invalidations.inc();
                held.push(Bytes::copy_from_slice(k));
            }
        }
    }
    (!held.is_empty()).then(|| HotInvalidate {
        hot: Arc::clone(hot),
        keys: held,
    })
}

/// Invalidates `keys` now, without counting them as requests (a transaction's writes, at `EXEC`);
/// gives what invalidates them again when the reply arrives.
pub(crate) fn invalidate(hot: &Arc<HotKeys>, keys: Vec<Bytes>) -> Option<HotInvalidate> {
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
    /// Caches `reply` if it is a hit, the key is still a top key and no write intervened.
    pub(crate) fn fill(self, reply: &Bytes) {
        if !(self.hit)(reply) || !self.hot.is_top(&self.key) {
            return;
        }
        if let Some(cache) = self.hot.cache() {
            // A copy: the reply is a slice of a connection's buffer (see `key`).
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
