//! The health check's flag (`--health-check-interval`): how often every server of every pool is
//! probed ([`super::health`]).

use std::time::Duration;

use crate::config::{ConfigErrors, PoolConfig};
use crate::flags::ApplyToPools;

/// `--health-check-interval`'s default, in milliseconds (as [`PoolConfig`]'s).
const DEFAULT_INTERVAL_MS: u64 = 1000;

/// The servers' health probes. [`Default`]: none given, every second.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct HealthCheckFlags {
    /// How often every server is probed with `version` to eject dead ones and let recovered ones
    /// rejoin, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub health_check_interval: u64,
}

impl Default for HealthCheckFlags {
    fn default() -> HealthCheckFlags {
        HealthCheckFlags {
            health_check_interval: DEFAULT_INTERVAL_MS,
        }
    }
}

impl ApplyToPools for HealthCheckFlags {
    /// Every pool, of either protocol.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        for pool in pools {
            pool.health_check_interval = Duration::from_millis(self.health_check_interval);
        }
        Ok(())
    }
}
