//! Hot keys: which keys of a pool take the most requests now, and (opt-in) a small in-proxy cache of
//! their replies. Consistent hashing cannot spread one key over several servers; this finds such keys
//! and takes their reads off their server.
//!
//! - `sketch`: a count-min sketch over a sliding window, shared lock-free by every client;
//! - `tracker`: the top K, re-ranked by the ticker and published as an arc-swap snapshot;
//! - `cache`: the replies of the top K keys, bounded in bytes and in staleness;
//! - `clock`: the coarse clock the request path reads instead of `Instant::now()`;
//! - `requests`: what a read or a write does with them, whatever its protocol;
//! - `flags`: `--hot-keys` and the cache's flags, and how they set each pool's hot-key settings.
//!
//! Nothing here knows a wire protocol: the protocol decides which requests are reads of one key (and may
//! be served from the cache), which are writes (and invalidate), and what a cacheable reply is
//! (`protocol/memcache/remedies/hot_keys.rs`).
//!
//! Cost per request with detection on: one xxh3 of the key, four relaxed `fetch_add`s and four loads on
//! the sketch, one relaxed load of the bar; only keys at or above the bar load the published set
//! (arc-swap, no lock). With the cache on, top keys also take a `quick_cache` lookup (a sharded
//! read lock inside that crate).

mod cache;
mod clock;
pub(crate) mod flags;
pub(crate) mod requests;
mod sketch;
mod tracker;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::cache::HotCache;
pub(crate) use self::tracker::HotSet;

use self::clock::CoarseClock;
use self::sketch::{key_hash, Sketch};
use self::tracker::Tracker;
use crate::config::HotKeysConfig;
use crate::metrics::PoolStats;

/// How often the ranking is refreshed (and published to the stats).
pub(crate) const REFRESH: Duration = Duration::from_millis(100);

/// One pool's hot-key state. Built once when the pool starts; kept across reloads (the cache is
/// cleared by a reload).
#[derive(Debug)]
pub(crate) struct HotKeys {
    /// The settings.
    config: HotKeysConfig,
    /// The time the cache's TTL is measured on.
    clock: CoarseClock,
    /// Request counts over the window.
    sketch: Sketch,
    /// The ranking.
    tracker: Tracker,
    /// The replies of the top keys, when the cache is on.
    cache: Option<HotCache>,
    /// The pool's tallies (cache fills are counted when a reply arrives, away from the plan).
    stats: Arc<PoolStats>,
}

impl HotKeys {
    /// The state for `config`.
    pub(crate) fn new(config: &HotKeysConfig, stats: Arc<PoolStats>) -> HotKeys {
        HotKeys {
            config: config.clone(),
            clock: CoarseClock::new(),
            sketch: Sketch::new(),
            tracker: Tracker::new(config.top),
            cache: config.cache_ttl.map(|ttl| {
                HotCache::new(
                    config.cache_bytes,
                    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
                )
            }),
            stats,
        }
    }

    /// The pool's tallies.
    pub(crate) fn stats(&self) -> &PoolStats {
        &self.stats
    }

    /// Counts one request for `key`; returns whether the key is one of the top K now.
    pub(crate) fn observe(&self, key: &[u8]) -> bool {
        let hash = key_hash(key);
        let estimate = self.sketch.add(hash);
        self.tracker.offer(hash, key, estimate)
    }

    /// The hash `key` is counted by, for [`HotKeys::estimate`].
    pub(crate) fn hash(key: &[u8]) -> u64 {
        key_hash(key)
    }

    /// The requests counted for the key of `hash` over the window (between half of it and all of
    /// it), without counting one: how a per-key rate limit tells which keys could be over it.
    pub(crate) fn estimate(&self, hash: u64) -> u32 {
        self.sketch.estimate(hash)
    }

    /// Whether `key` is one of the top K now, without counting it.
    pub(crate) fn is_top(&self, key: &[u8]) -> bool {
        self.tracker.current().is_top(key_hash(key))
    }

    /// The cache, when it is on.
    pub(crate) fn cache(&self) -> Option<&HotCache> {
        self.cache.as_ref()
    }

    /// The coarse time, for the cache.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The latest ranking.
    pub(crate) fn current(&self) -> Arc<HotSet> {
        self.tracker.current()
    }

    /// The window the counts cover (between a half and all of it).
    pub(crate) fn window(&self) -> Duration {
        self.config.window
    }

    /// How often the ticker must run: the clock's resolution when the cache reads it, else the refresh
    /// period.
    pub(crate) fn tick_period(&self) -> Duration {
        if self.cache.is_some() {
            clock::RESOLUTION
        } else {
            REFRESH
        }
    }

    /// The ticker's work, every [`HotKeys::tick_period`]: advance the clock, re-rank every
    /// [`REFRESH`], slide the window every half window. `state` is the ticker's own (last refresh and
    /// rotation times). Returns whether the ranking was refreshed.
    pub(crate) fn tick(&self, state: &mut TickState) -> bool {
        self.clock.tick();
        let now = self.clock.now_ms();
        let half = u64::try_from(self.config.window.as_millis() / 2)
            .unwrap_or(u64::MAX)
            .max(1);
        if now.saturating_sub(state.rotated_ms) >= half {
            self.sketch.rotate();
            state.rotated_ms = now;
        }
        let refresh = u64::try_from(REFRESH.as_millis()).unwrap_or(100);
        if now.saturating_sub(state.refreshed_ms) >= refresh {
            self.tracker.refresh(&self.sketch);
            state.refreshed_ms = now;
            return true;
        }
        false
    }
}

/// The ticker's memory between ticks.
#[derive(Debug, Default)]
pub(crate) struct TickState {
    /// Coarse time of the last window slide.
    rotated_ms: u64,
    /// Coarse time of the last re-ranking.
    refreshed_ms: u64,
}
