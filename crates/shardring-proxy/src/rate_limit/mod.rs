//! Rate limits (`--key-rate-limit`, `--pool-rate-limit`): requests a second for each hot key of a
//! pool and for the whole pool, whatever its protocol. A request over a limit is answered at once
//! with an error (`SERVER_ERROR rate limited: …`, `-ERR rate limited: …`; nothing for a memcached
//! `noreply`) and never reaches a server, so one key's flood costs its server nothing more and the
//! other keys there keep their latency.
//!
//! - `gcra`: one limit's bucket, lock-free;
//! - `flags`: the flags, and how they set each pool's limits.
//!
//! A per-key limit needs hot-key detection ([`crate::hot_keys`]): it applies to the keys that tracks
//! (its top K and the keys just below them), which bounds the buckets kept to those keys. The
//! buckets are found by the key's hash in a map published with arc-swap: a request reads it without
//! a lock, and a key newly tracked adds its bucket once. A pool's limits are built with each pool
//! version, so a reload that changes them starts full buckets.
//!
//! Cost per request with a limit on: a clock read, and for the per-key limit one xxh3 of each key
//! and a lookup in the published ranking; a tracked key's bucket is one compare-and-swap.

pub(crate) mod flags;
mod gcra;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use self::gcra::{Clock, Gcra};
use crate::config::RateLimits;
use crate::error::BackendError;
use crate::hot_keys::HotKeys;
use crate::metrics::PoolStats;

/// One pool version's rate limits.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    /// The pool's name, for the error and the log.
    pool: String,
    /// The limits.
    limits: RateLimits,
    /// The pool's bucket, with `--pool-rate-limit`.
    whole: Option<Gcra>,
    /// Each tracked key's bucket, by its hash, with `--key-rate-limit`.
    keys: ArcSwap<HashMap<u64, Arc<Gcra>>>,
    /// Serialises additions to `keys` (readers never take it).
    adding: Mutex<()>,
    /// The buckets' time.
    clock: Clock,
    /// When a refusal was last logged (nanoseconds on `clock`; 0: never).
    logged: std::sync::atomic::AtomicU64,
}

/// How often a refusal is logged at most.
const LOG_EVERY_NS: u64 = 5_000_000_000;

impl RateLimiter {
    /// The limits of pool `pool`; `None` when it has none.
    pub(crate) fn new(pool: &str, limits: RateLimits) -> Option<RateLimiter> {
        if limits.key.is_none() && limits.pool.is_none() {
            return None;
        }
        Some(RateLimiter {
            pool: pool.to_owned(),
            limits,
            whole: limits.pool.map(Gcra::new),
            keys: ArcSwap::default(),
            adding: Mutex::new(()),
            clock: Clock::new(),
            logged: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Whether a request for `keys` may go on: the pool under its limit, and each key that `hot`
    /// tracks under its own. A refusal is counted in `stats` and is the error to answer with.
    pub(crate) fn admit<'k>(
        &self,
        hot: Option<&Arc<HotKeys>>,
        keys: impl IntoIterator<Item = &'k [u8]>,
        stats: &PoolStats,
    ) -> Result<(), BackendError> {
        let now = self.clock.now();
        if let (Some(rate), Some(hot)) = (self.limits.key, hot) {
            for key in keys {
                let hash = HotKeys::hash(key);
                if hot.tracks(hash) && !self.bucket(hash, rate).admit(now) {
                    stats.key_rate_limited.inc();
                    self.log(now, format_args!("key hash {hash:016x}"), rate);
                    return Err(BackendError::RateLimited {
                        what: "a key",
                        rate,
                        flag: "--key-rate-limit",
                    });
                }
            }
        }
        if let (Some(whole), Some(rate)) = (&self.whole, self.limits.pool) {
            if !whole.admit(now) {
                stats.pool_rate_limited.inc();
                self.log(now, format_args!("pool {}", self.pool), rate);
                return Err(BackendError::RateLimited {
                    what: "the pool",
                    rate,
                    flag: "--pool-rate-limit",
                });
            }
        }
        Ok(())
    }

    /// The bucket of the tracked key `hash`, added on its first request.
    fn bucket(&self, hash: u64, rate: u32) -> Arc<Gcra> {
        if let Some(b) = self.keys.load().get(&hash) {
            return Arc::clone(b);
        }
        self.add(hash, rate)
    }

    /// Adds `hash`'s bucket (once: another request may have added it meanwhile). The map is kept to
    /// a bound a few times the tracked keys: past it, it starts again empty (the keys still hot
    /// find new, full buckets at once, which lets at most one burst more through).
    #[cold]
    fn add(&self, hash: u64, rate: u32) -> Arc<Gcra> {
        let _adding = self.adding.lock();
        let current = self.keys.load();
        if let Some(b) = current.get(&hash) {
            return Arc::clone(b);
        }
        let mut next = if current.len() >= MAX_BUCKETS {
            HashMap::new()
        } else {
            HashMap::clone(&current)
        };
        let bucket = Arc::new(Gcra::new(rate));
        next.insert(hash, Arc::clone(&bucket));
        self.keys.store(Arc::new(next));
        bucket
    }

    /// Logs a refusal, at most once every few seconds (the key by its hash, never itself).
    fn log(&self, now: u64, what: std::fmt::Arguments<'_>, rate: u32) {
        use std::sync::atomic::Ordering::Relaxed;
        let last = self.logged.load(Relaxed);
        if (last == 0 || now.saturating_sub(last) >= LOG_EVERY_NS)
            && self
                .logged
                .compare_exchange(last, now.max(1), Relaxed, Relaxed)
                .is_ok()
        {
            tracing::warn!(
                pool = %self.pool,
                over = %what,
                rate,
                "rate limited: requests over the limit are refused (logged once every 5 s)"
            );
        }
    }
}

/// The most per-key buckets kept: the tracker follows at most 2 × 1000 + 8 keys, and a key drops
/// out and comes back as the load shifts.
const MAX_BUCKETS: usize = 8192;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HotKeysConfig;

    #[test]
    fn only_a_tracked_key_is_limited_and_the_pool_limit_counts_every_request() {
        let stats = Arc::new(PoolStats::new("p"));
        let hot = Arc::new(HotKeys::new(&HotKeysConfig::new(4), Arc::clone(&stats)));
        let limits = RateLimits {
            key: Some(10),
            pool: None,
        };
        let limiter = RateLimiter::new("p", limits).unwrap();
        // Untracked: never limited.
        for _ in 0..100 {
            assert!(limiter.admit(Some(&hot), [&b"cold"[..]], &stats).is_ok());
        }
        // Tracked (offered and ranked): a burst of one, then refused.
        for _ in 0..50 {
            hot.observe(b"hot");
        }
        hot.rank_now();
        assert!(hot.tracks(HotKeys::hash(b"hot")));
        assert!(limiter.admit(Some(&hot), [&b"hot"[..]], &stats).is_ok());
        let err = limiter
            .admit(Some(&hot), [&b"cold"[..], &b"hot"[..]], &stats)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "rate limited: a key is over its limit of 10 requests a second (--key-rate-limit)"
        );
        assert_eq!(stats.key_rate_limited.get(), 1);

        let whole = RateLimiter::new(
            "p",
            RateLimits {
                key: None,
                pool: Some(20),
            },
        )
        .unwrap();
        let admitted = (0..100)
            .filter(|_| whole.admit(None, [&b"any"[..]], &stats).is_ok())
            .count();
        assert_eq!(admitted, 2, "a tenth of a second's worth at once");
        assert_eq!(stats.pool_rate_limited.get(), 98);
        assert!(RateLimiter::new("p", RateLimits::default()).is_none());
    }
}
