//! The hot-key cache: recent replies for a pool's current top keys, so a key that takes a large share of
//! the traffic stops sending all of it to one server.
//!
//! - **Bounded bytes**: a `quick_cache` (sharded, CLOCK-Pro eviction) weighed by key plus reply bytes.
//! - **Bounded staleness**: an entry is served for at most `ttl` after it was filled (read on the coarse
//!   clock, so up to one clock tick more), whatever the server's value does meanwhile through other
//!   proxies or clients.
//! - **Writes through this proxy are seen on the next read**: a write to a cached key removes it when the
//!   write is planned and again when its reply arrives, and a fill that raced an invalidation is dropped
//!   (a generation number, checked after the insert: see [`HotCache::fill`]).

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use bytes::Bytes;

/// A cached reply and when it was filled.
#[derive(Debug, Clone)]
struct Entry {
    /// The server's reply, as the client gets it.
    reply: Bytes,
    /// Coarse-clock milliseconds at the fill.
    filled_ms: u64,
}

/// Weighs an entry by its bytes plus a fixed overhead, so the byte bound holds for small values too.
#[derive(Debug, Clone, Copy)]
struct ByBytes;

impl quick_cache::Weighter<Bytes, Entry> for ByBytes {
    fn weight(&self, key: &Bytes, entry: &Entry) -> u64 {
        (key.len() + entry.reply.len() + 64) as u64
    }
}

/// The cache of one pool.
pub(crate) struct HotCache {
    /// Key → reply.
    entries: quick_cache::sync::Cache<Bytes, Entry, ByBytes>,
    /// How long an entry is served after its fill, in milliseconds.
    ttl_ms: u64,
    /// Bumped by every invalidation; a fill started before a bump is dropped. `SeqCst` so that its order
    /// against the cache's own (locked) inserts and removals is one total order: see [`HotCache::fill`].
    generation: AtomicU64,
}

impl std::fmt::Debug for HotCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotCache")
            .field("entries", &self.entries.len())
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

impl HotCache {
    /// A cache of at most `bytes` bytes serving entries for `ttl_ms` milliseconds.
    pub(crate) fn new(bytes: u64, ttl_ms: u64) -> HotCache {
        HotCache {
            entries: quick_cache::sync::Cache::with_weighter(64, bytes.max(1), ByBytes),
            ttl_ms,
            generation: AtomicU64::new(0),
        }
    }

    /// The reply cached for `key`, if it was filled at most the TTL ago.
    pub(crate) fn get(&self, key: &[u8], now_ms: u64) -> Option<Bytes> {
        let e = self.entries.get(key)?;
        (now_ms.saturating_sub(e.filled_ms) <= self.ttl_ms).then_some(e.reply)
    }

    /// Whether an entry (fresh or not) is held for `key`.
    pub(crate) fn holds(&self, key: &[u8]) -> bool {
        self.entries.contains_key(key)
    }

    /// The generation to hand to [`HotCache::fill`] for a read planned now.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(SeqCst)
    }

    /// Caches `reply` for `key`, unless an invalidation happened since `generation` was read.
    ///
    /// The insert comes first and the check after it: an invalidation either bumps the generation
    /// before the check (then this fill removes what it inserted) or removes the key after the insert
    /// (then its removal wins). Either way no reply older than a write planned through this proxy stays.
    pub(crate) fn fill(&self, key: Bytes, reply: Bytes, generation: u64, now_ms: u64) -> bool {
        if self.generation.load(SeqCst) != generation {
            return false;
        }
        self.entries.insert(
            key.clone(),
            Entry {
                reply,
                filled_ms: now_ms,
            },
        );
        if self.generation.load(SeqCst) != generation {
            self.entries.remove(&key);
            return false;
        }
        true
    }

    /// Forgets `key` and drops every fill in flight.
    pub(crate) fn invalidate(&self, key: &[u8]) {
        self.generation.fetch_add(1, SeqCst);
        self.entries.remove(key);
    }

    /// Forgets everything (`flush_all`, reload).
    pub(crate) fn clear(&self) {
        self.generation.fetch_add(1, SeqCst);
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_ttl() {
        let c = HotCache::new(1 << 20, 100);
        assert!(c.fill(
            Bytes::from_static(b"k"),
            Bytes::from_static(b"v"),
            c.generation(),
            1000
        ));
        assert_eq!(c.get(b"k", 1100).as_deref(), Some(&b"v"[..]));
        assert_eq!(c.get(b"k", 1101), None);
    }

    #[test]
    fn a_fill_that_raced_an_invalidation_is_dropped() {
        let c = HotCache::new(1 << 20, 100);
        let g = c.generation();
        c.invalidate(b"k");
        assert!(!c.fill(Bytes::from_static(b"k"), Bytes::from_static(b"old"), g, 0));
        assert_eq!(c.get(b"k", 0), None);
    }

    #[test]
    fn the_byte_bound_holds() {
        let c = HotCache::new(10_000, 100);
        for i in 0..1000u32 {
            let k = Bytes::from(format!("key{i}"));
            c.fill(k, Bytes::from(vec![b'x'; 100]), c.generation(), 0);
        }
        assert!(c.entries.weight() <= 10_000, "{}", c.entries.weight());
    }
}
