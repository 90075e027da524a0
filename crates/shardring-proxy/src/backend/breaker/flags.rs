//! The circuit breakers' flags (`--circuit-breakers`, `--max-pending`, `--outlier-failures`,
//! `--outlier-slow`, `--outlier-ejection`, `--outlier-max-ejection`): every pool's servers, of
//! either protocol. The tuning flags take `N` (every pool with breakers) or `POOL=N` (one).

use std::time::Duration;

use crate::config::{BreakerConfig, ConfigErrors, PoolConfig};
use crate::flags::per_pool::{
    for_pool, named, parse_pool_number, parse_pool_switch, refuse_unknown, switched_on,
    switches_named,
};
use crate::flags::ApplyToPools;

/// The circuit breakers. [`Default`]: none given, no pool has them.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
#[command(next_help_heading = "Circuit breakers")]
pub struct BreakerFlags {
    /// Circuit breakers on every server of every pool (`--circuit-breakers`) or of one
    /// (`--circuit-breakers=POOL`, repeat for several): a cap on each server's pending requests, and
    /// outlier ejection (consecutive failures or slow replies eject a server for a time that doubles
    /// with each ejection; then one request probes it). While a server is out its keys get a fast
    /// error naming it and the reason; the placement never changes (auto_eject_hosts does that).
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch)]
    pub circuit_breakers: Vec<Option<String>>,
    /// The most requests pending on one server; more get a fast error. [default: 1024]
    #[arg(long, value_name = "[POOL=]N", requires = "circuit_breakers",
          value_parser = |t: &str| parse_pool_number(t, "a request count", 1, 1 << 24))]
    pub max_pending: Vec<(Option<String>, u64)>,
    /// Consecutive failures (failed connections, timeouts, slow replies) that eject a server.
    /// [default: 5]
    #[arg(long, value_name = "[POOL=]N", requires = "circuit_breakers",
          value_parser = |t: &str| parse_pool_number(t, "a failure count", 1, 1000))]
    pub outlier_failures: Vec<(Option<String>, u64)>,
    /// A reply slower than this many milliseconds, or a request unanswered for as long, is a
    /// failure; 0 counts errors only. [default: 200]
    #[arg(long, value_name = "[POOL=]MS", requires = "circuit_breakers",
          value_parser = |t: &str| parse_pool_number(t, "milliseconds", 0, 3_600_000))]
    pub outlier_slow: Vec<(Option<String>, u64)>,
    /// How long a server's first ejection lasts, in milliseconds; each one that follows without a
    /// healthy interval doubles it. [default: 1000]
    #[arg(long, value_name = "[POOL=]MS", requires = "circuit_breakers",
          value_parser = |t: &str| parse_pool_number(t, "milliseconds", 1, 3_600_000))]
    pub outlier_ejection: Vec<(Option<String>, u64)>,
    /// The longest an ejection lasts, in milliseconds. [default: 30000]
    #[arg(long, value_name = "[POOL=]MS", requires = "circuit_breakers",
          value_parser = |t: &str| parse_pool_number(t, "milliseconds", 1, 3_600_000))]
    pub outlier_max_ejection: Vec<(Option<String>, u64)>,
}

impl BreakerFlags {
    /// The breakers of pool `name`, when they are on for it.
    fn config(&self, name: &str) -> Option<BreakerConfig> {
        if !switched_on(&self.circuit_breakers, name) {
            return None;
        }
        let mut c = BreakerConfig::default();
        let ms = |values: &[(Option<String>, u64)]| {
            for_pool(values, name).map(|v| Duration::from_millis(*v))
        };
        if let Some(n) = for_pool(&self.max_pending, name) {
            c.max_pending = u32::try_from(*n).unwrap_or(u32::MAX);
        }
        if let Some(n) = for_pool(&self.outlier_failures, name) {
            c.consecutive_failures = u32::try_from(*n).unwrap_or(u32::MAX);
        }
        if let Some(slow) = ms(&self.outlier_slow) {
            c.slow = (!slow.is_zero()).then_some(slow);
        }
        if let Some(t) = ms(&self.outlier_ejection) {
            c.base_ejection = t;
        }
        if let Some(t) = ms(&self.outlier_max_ejection) {
            c.max_ejection = t;
        }
        Some(c)
    }
}

impl ApplyToPools for BreakerFlags {
    /// Every pool the switch names, memcached or redis alike.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        for pool in pools.iter_mut() {
            pool.breakers = self.config(&pool.name);
        }
        let mut errors = ConfigErrors::default();
        refuse_unknown(
            "--circuit-breakers",
            switches_named(&self.circuit_breakers),
            pools,
            &mut errors,
        );
        for (flag, values) in [
            ("--max-pending", &self.max_pending),
            ("--outlier-failures", &self.outlier_failures),
            ("--outlier-slow", &self.outlier_slow),
            ("--outlier-ejection", &self.outlier_ejection),
            ("--outlier-max-ejection", &self.outlier_max_ejection),
        ] {
            refuse_unknown(flag, named(values), pools, &mut errors);
        }
        errors.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: BreakerFlags,
    }

    fn pools() -> Vec<PoolConfig> {
        ["mc", "rd"]
            .iter()
            .map(|n| PoolConfig::new(n, "127.0.0.1:0", &["127.0.0.1:11211:1"]).unwrap())
            .collect()
    }

    fn applied(args: &[&str]) -> Result<Vec<PoolConfig>, ConfigErrors> {
        let cli =
            Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).expect("parses");
        let mut pools = pools();
        cli.flags.apply(&mut pools).map(|()| pools)
    }

    #[test]
    fn the_switch_turns_on_the_defaults_and_a_pools_own_value_wins() {
        let pools = applied(&[
            "--circuit-breakers",
            "--max-pending",
            "100",
            "--outlier-slow",
            "rd=0",
        ])
        .unwrap();
        let (mc, rd) = (pools[0].breakers.unwrap(), pools[1].breakers.unwrap());
        assert_eq!(mc.max_pending, 100);
        assert_eq!(mc.slow, BreakerConfig::default().slow);
        assert_eq!(rd.slow, None, "0: errors only");
        assert_eq!(rd.consecutive_failures, 5);
    }

    #[test]
    fn one_pool_only_and_an_unknown_pool_is_an_error() {
        let pools = applied(&["--circuit-breakers=rd"]).unwrap();
        assert_eq!(pools[0].breakers, None);
        assert!(pools[1].breakers.is_some());
        assert!(applied(&["--circuit-breakers=nope"]).is_err());
        assert!(applied(&["--circuit-breakers", "--outlier-failures", "nope=3"]).is_err());
        assert!(
            Cli::try_parse_from(["x", "--max-pending", "10"]).is_err(),
            "needs the switch"
        );
        assert_eq!(applied(&[]).unwrap()[0].breakers, None, "off by default");
    }
}
