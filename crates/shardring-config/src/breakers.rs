//! A pool's circuit breakers (*proxy-only*): per server, a cap on the requests pending and outlier
//! detection (consecutive failures or slow replies eject the server for a growing interval; one
//! request at a time then probes it, half-open). Envoy's circuit breakers and outlier detection
//! are the reference; the defaults differ where a cache is not an HTTP service (see each).
//!
//! Beside twemproxy's `auto_eject_hosts`, never instead of it: that one takes a failing server out
//! of the placement (its keys go to other servers); a breaker keeps the placement and answers the
//! server's keys with a fast error while it is out, so no key moves and no value is read from a
//! server that does not hold it.

use std::time::Duration;

use super::problem::ConfigErrors;

/// One pool's breakers. `shardring proxy --circuit-breakers` turns them on with these defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Requests pending on one server (sent or waiting to be, over every worker and connection)
    /// beyond which a new request fails at once instead of joining the queue. By default, 1024
    /// (Envoy's `max_pending_requests` and `max_requests`). `--max-pending [POOL=]N`.
    pub max_pending: u32,
    /// Consecutive failures (a failed connection or connect, a timeout, a slow reply) that eject
    /// the server. By default, 5 (Envoy's `consecutive_5xx`). `--outlier-failures [POOL=]N`.
    pub consecutive_failures: u32,
    /// A reply slower than this, or a request still unanswered after it, counts as a failure; `None`
    /// counts only errors. By default, 200 ms: a cache server answers in well under a millisecond,
    /// and a stall (a server paused, swapping, or stuck in a slow command) shows as requests that
    /// wait, long before the pool's `timeout` (often seconds, or none) ends them.
    /// `--outlier-slow [POOL=]MS` (0: none).
    pub slow: Option<Duration>,
    /// How long the first ejection lasts; each ejection that follows without a healthy interval
    /// between doubles it. By default, 1 s (Envoy's `base_ejection_time` is 30 s, made for
    /// services whose clients retry elsewhere; a cache key has one server, so its keys fail while it
    /// is out, and a short first interval brings a server that recovered back soon).
    /// `--outlier-ejection [POOL=]MS`.
    pub base_ejection: Duration,
    /// The longest an ejection lasts. By default, 30 s (Envoy's `max_ejection_time` is 300 s).
    /// `--outlier-max-ejection [POOL=]MS`.
    pub max_ejection: Duration,
}

impl Default for BreakerConfig {
    fn default() -> BreakerConfig {
        BreakerConfig {
            max_pending: 1024,
            consecutive_failures: 5,
            slow: Some(Duration::from_millis(200)),
            base_ejection: Duration::from_secs(1),
            max_ejection: Duration::from_secs(30),
        }
    }
}

impl BreakerConfig {
    /// Every problem with these settings, keyed by pool `n`.
    pub(super) fn validate(&self, n: &str, errors: &mut ConfigErrors) {
        if self.max_pending == 0 {
            errors.push(n, "the pending-request cap must be at least 1".into());
        }
        if self.consecutive_failures == 0 {
            errors.push(n, "the outlier failure count must be at least 1".into());
        }
        if self.base_ejection.is_zero() {
            errors.push(n, "the outlier ejection time must be greater than 0".into());
        }
        if self.max_ejection < self.base_ejection {
            errors.push(
                n,
                format!(
                    "the longest outlier ejection ({} ms) is shorter than the first ({} ms)",
                    self.max_ejection.as_millis(),
                    self.base_ejection.as_millis()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_a_cap_of_zero_is_not() {
        let mut errors = ConfigErrors::default();
        BreakerConfig::default().validate("p", &mut errors);
        assert!(errors.problems.is_empty(), "{errors:?}");
        let bad = BreakerConfig {
            max_pending: 0,
            max_ejection: Duration::from_millis(10),
            ..BreakerConfig::default()
        };
        bad.validate("p", &mut errors);
        assert_eq!(errors.problems.len(), 2, "{errors:?}");
    }
}
