//! The rate limits' flags (`--key-rate-limit`, `--pool-rate-limit`): requests a second, `N` for
//! every pool or `POOL=N` for one, memcached or redis alike.

use crate::config::{ConfigErrors, PoolConfig};
use crate::flags::per_pool::{for_pool, named, parse_pool_number, refuse_unknown};
use crate::flags::ApplyToPools;

/// The rate limits. [`Default`]: none given, no limit.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
#[command(next_help_heading = "Rate limits")]
pub struct RateLimitFlags {
    /// Requests a second that one hot key may take; the excess gets a fast error (memcached
    /// `SERVER_ERROR rate limited: …`, Redis `-ERR rate limited: …`) and never reaches its server.
    /// Applies to the keys --hot-keys tracks (its top K and those just below them), which it needs.
    #[arg(long, value_name = "[POOL=]N",
          value_parser = |t: &str| parse_pool_number(t, "requests a second", 1, u64::from(u32::MAX)))]
    pub key_rate_limit: Vec<(Option<String>, u64)>,
    /// Requests a second that a whole pool may take, over every client; the excess gets a fast
    /// error.
    #[arg(long, value_name = "[POOL=]N",
          value_parser = |t: &str| parse_pool_number(t, "requests a second", 1, u64::from(u32::MAX)))]
    pub pool_rate_limit: Vec<(Option<String>, u64)>,
}

impl ApplyToPools for RateLimitFlags {
    /// Every pool, of either protocol, with its own value or the plain one.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        let rate = |values: &[(Option<String>, u64)], pool: &str| {
            for_pool(values, pool).map(|n| u32::try_from(*n).unwrap_or(u32::MAX))
        };
        for pool in pools.iter_mut() {
            pool.rate_limits.key = rate(&self.key_rate_limit, &pool.name);
            pool.rate_limits.pool = rate(&self.pool_rate_limit, &pool.name);
        }
        let mut errors = ConfigErrors::default();
        refuse_unknown(
            "--key-rate-limit",
            named(&self.key_rate_limit),
            pools,
            &mut errors,
        );
        refuse_unknown(
            "--pool-rate-limit",
            named(&self.pool_rate_limit),
            pools,
            &mut errors,
        );
        errors.into_result()
    }
}
