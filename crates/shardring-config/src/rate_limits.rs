//! A pool's rate limits (*proxy-only*): requests a second for each of its hottest keys, and for the
//! whole pool. The excess is answered at once with an error (never queued, never sent), so a key or a
//! pool over its limit costs its server nothing more and the other keys of that server keep their
//! latency.

use super::problem::ConfigErrors;

/// One pool's rate limits. By default, none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimits {
    /// Requests a second that one key may take (a token bucket per key, holding one second's worth).
    /// Only the keys hot-key detection tracks are limited (its top K and the keys just below them),
    /// which bounds the memory: a key outside them takes fewer requests than every key in them, so
    /// a limit below that is not met by one. Needs hot-key detection. `--key-rate-limit [POOL=]N`.
    pub key: Option<u32>,
    /// Requests a second that the whole pool may take, over every client (one token bucket, one
    /// second's worth). `--pool-rate-limit [POOL=]N`.
    pub pool: Option<u32>,
}

impl RateLimits {
    /// Every problem with these settings, keyed by pool `n`; `hot_keys`: whether the pool detects
    /// hot keys.
    pub(super) fn validate(&self, n: &str, hot_keys: bool, errors: &mut ConfigErrors) {
        if self.key == Some(0) || self.pool == Some(0) {
            errors.push(n, "a rate limit must be at least 1 request a second".into());
        }
        if self.key.is_some() && !hot_keys {
            errors.push(
                n,
                "the per-key rate limit needs hot-key detection (--hot-keys K): it limits the keys that tracks".into(),
            );
        }
    }
}
