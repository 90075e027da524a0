//! Rate limits (`--key-rate-limit`, `--pool-rate-limit`): requests a second for each hot key of a
//! pool and for the whole pool, whatever its protocol. A request over a limit is answered at once
//! with an error (`SERVER_ERROR rate limited: …`, `-ERR rate limited: …`; nothing for a memcached
//! `noreply`) and never reaches a server, so one key's flood costs its server nothing more and the
//! other keys there keep their latency.
//!
//! - `gcra`: one limit's bucket, lock-free;
//! - `flags`: the flags, and how they set each pool's limits.
//!
//! A per-key limit needs hot-key detection ([`crate::hot_keys`]): its sketch says how many requests
//! each key took over the window, and a key gets a bucket once that count reaches what its limit
//! allows in a tenth of a second (or in a quarter of the window, when that is shorter). Below that
//! mark a key cannot be over its rate (it took less than a tenth of a second's worth in at least half
//! a window), and at it the bucket starts at once: not at the next ranking, which under a flood of
//! 100,000 requests a second let 10,000 through first. The buckets live in a bounded concurrent map
//! (`quick_cache`, [`MAX_BUCKETS`]). A new bucket starts with its burst spent (the key has just
//! taken the mark's requests), so a flood gets through its rate and the mark, nothing more; a
//! bucket evicted and made again lets at most one mark more through. A refused request still counts toward its key's heat, so the hot-key
//! ranking shows what clients ask for. A pool's limits are built with each pool version, so a reload
//! that changes them starts full buckets.
//!
//! Cost per request with a limit on: a clock read, and for the per-key limit one xxh3 of each key
//! and eight relaxed loads of the sketch; a key at the mark adds a lookup in the buckets' map (a
//! sharded read lock) and one compare-and-swap.

pub(crate) mod flags;
mod gcra;

use std::sync::Arc;

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
    /// Each key's bucket, by its hash, once the key reached [`RateLimiter::mark`], with
    /// `--key-rate-limit`.
    keys: quick_cache::sync::Cache<u64, Arc<Gcra>>,
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
            keys: quick_cache::sync::Cache::new(MAX_BUCKETS),
            clock: Clock::new(),
            logged: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Whether a request for `keys` may go on: the pool under its limit, and each key that `hot`
    /// counted up to the mark under its own. A refusal is counted in `stats` and is the error to
    /// answer with.
    pub(crate) fn admit<'k>(
        &self,
        hot: Option<&Arc<HotKeys>>,
        keys: impl IntoIterator<Item = &'k [u8]>,
        stats: &PoolStats,
    ) -> Result<(), BackendError> {
        self.admit_at(self.clock.now(), hot, keys, stats)
    }

    /// [`RateLimiter::admit`] at `now` (nanoseconds on the limiter's clock).
    fn admit_at<'k>(
        &self,
        now: u64,
        hot: Option<&Arc<HotKeys>>,
        keys: impl IntoIterator<Item = &'k [u8]>,
        stats: &PoolStats,
    ) -> Result<(), BackendError> {
        if let (Some(rate), Some(hot)) = (self.limits.key, hot) {
            let mark = mark(rate, hot.window());
            for key in keys {
                let hash = HotKeys::hash(key);
                if hot.estimate(hash) >= mark && !self.bucket(hash, rate, now).admit(now) {
                    hot.observe(key);
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

    /// The bucket of `hash`, made on the key's first request at the mark with its burst spent (the
    /// key took the mark's requests, a burst's worth, just before).
    fn bucket(&self, hash: u64, rate: u32, now: u64) -> Arc<Gcra> {
        self.keys
            .get_or_insert_with(&hash, || {
                Ok::<_, std::convert::Infallible>(Arc::new(Gcra::spent(rate, now)))
            })
            .unwrap_or_else(|never| match never {})
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

/// The most per-key buckets kept (each some 60 bytes with its map entry): room for every key at
/// its mark in all but a pool whose whole load is spread evenly over its keys at just their limit.
const MAX_BUCKETS: usize = 8192;

/// The count over the window at which a key gets its bucket: what `rate` allows in a tenth of a
/// second, or in a quarter of the window when that is shorter (the sketch's count covers at least
/// half the window, so a key below the mark took under half its rate there), and at least 2.
fn mark(rate: u32, window: std::time::Duration) -> u32 {
    let span_ms = (window.as_millis() / 4).min(100);
    u32::try_from(u128::from(rate) * span_ms / 1000)
        .unwrap_or(u32::MAX)
        .max(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HotKeysConfig;

    #[test]
    fn only_a_key_at_the_mark_is_limited_and_the_pool_limit_counts_every_request() {
        let stats = Arc::new(PoolStats::new("p"));
        let hot = Arc::new(HotKeys::new(&HotKeysConfig::new(4), Arc::clone(&stats)));
        let limits = RateLimits {
            key: Some(10),
            pool: None,
        };
        let limiter = RateLimiter::new("p", limits).unwrap();
        // Below the mark (never counted here): never limited.
        for _ in 0..100 {
            assert!(limiter.admit(Some(&hot), [&b"cold"[..]], &stats).is_ok());
        }
        // Counted past the mark (2 for 10 a second): one more (the burst was spent), then refused.
        for _ in 0..50 {
            hot.observe(b"hot");
        }
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

    /// A flood of one key at `offered` a second for `seconds`, counted by the detector as the
    /// request path counts it (after the limit admits it): how many requests get through.
    fn flood(rate: u32, offered: u64, seconds: u64) -> (u64, u64) {
        let stats = Arc::new(PoolStats::new("p"));
        let hot = Arc::new(HotKeys::new(&HotKeysConfig::new(8), Arc::clone(&stats)));
        let limiter = RateLimiter::new(
            "p",
            RateLimits {
                key: Some(rate),
                pool: None,
            },
        )
        .unwrap();
        let step = 1_000_000_000 / offered;
        let admitted = (0..offered * seconds)
            .filter(|i| {
                let ok = limiter
                    .admit_at(i * step, Some(&hot), [&b"flood"[..]], &stats)
                    .is_ok();
                if ok {
                    hot.observe(b"flood");
                }
                ok
            })
            .count() as u64;
        (admitted, stats.key_rate_limited.get())
    }

    #[test]
    fn a_flooded_key_gets_its_rate_from_the_start_not_from_the_next_ranking() {
        // 100× over for 2 s: the rate, plus the mark (a tenth of a second's worth) counted before
        // the bucket starts spent. Never ranked: detection is immediate.
        let (admitted, refused) = flood(1000, 100_000, 2);
        assert!((2000..=2101).contains(&admitted), "{admitted}");
        assert_eq!(admitted + refused, 200_000);
        // Under the limit: everything.
        assert_eq!(flood(1000, 900, 3).0, 2700);
        // A slow limit: the mark's floor of 2, then one a second.
        assert!((3..=5).contains(&flood(1, 1000, 3).0));
    }

    #[test]
    fn the_mark_is_a_tenth_of_a_seconds_worth_or_a_quarter_window() {
        use std::time::Duration;
        assert_eq!(mark(1000, Duration::from_secs(10)), 100);
        assert_eq!(mark(1000, Duration::from_millis(200)), 50);
        assert_eq!(mark(5, Duration::from_secs(10)), 2);
        assert_eq!(mark(u32::MAX, Duration::from_secs(u64::MAX)), 429_496_729);
    }
}
