//! The proxy's flags: what twemproxy's file has no key for (nutcracker refuses a file with keys it
//! does not know, so the command line gives them), the same for every pool unless a flag names one.
//!
//! Each feature's flags are a [`clap::Args`] group defined beside the feature, knowing which
//! protocols' pools it serves and how it sets them ([`ApplyToPools`]): [`HotKeyFlags`] in
//! `hot_keys/`, [`TlsFlags`] in `tls/`, [`SentinelFlags`] in `sentinel/`, [`ClusterFlags`] in `cluster/`, [`HealthCheckFlags`] in
//! `backend/`, [`BreakerFlags`] in `backend/breaker/`,
//! [`RateLimitFlags`] in `rate_limit/`, [`SplitFlags`] in `split/`, `MembershipFlags` in `membership/`, [`MetricsFlags`] in `metrics/`, [`WorkerFlags`] in
//! `workers/`; the protocols' own beside their code: [`MemcacheFlags`] in `protocol/memcache/`,
//! [`RemedyFlags`] (the memcached remedies) in `protocol/memcache/remedies/`, [`RedisFlags`] in
//! `protocol/redis/`. This folder keeps [`LimitFlags`] (both protocols' request limits) and what
//! the groups share (`per_pool`: `[POOL=]VALUE` lists; `size`: byte sizes). A new flag goes into
//! its feature's group and changes nothing else. [`ProxyFlags`] gathers the groups for `shardring proxy` to flatten after nutcracker's own
//! flags: a new feature's group is one field there (and, when it sets pools, one entry of the groups
//! [`ProxyFlags::apply`] applies).
//!
//! The flags are applied alike at start, by `-t` and on every reload ([`ProxyFlags::apply`]), to the
//! pools as the file gives them.

mod limits;
pub(crate) mod per_pool;
pub(crate) mod size;
#[cfg(test)]
mod tests;

pub use self::limits::LimitFlags;
pub use crate::backend::breaker::flags::BreakerFlags;
pub use crate::backend::flags::HealthCheckFlags;
pub use crate::cluster::flags::ClusterFlags;
pub use crate::hot_keys::flags::HotKeyFlags;
#[cfg(feature = "etcd")]
pub use crate::membership::flags::MembershipFlags;
pub use crate::metrics::flags::MetricsFlags;
pub use crate::protocol::memcache::flags::MemcacheFlags;
pub use crate::protocol::memcache::remedies::flags::RemedyFlags;
pub use crate::protocol::redis::flags::RedisFlags;
pub use crate::rate_limit::flags::RateLimitFlags;
pub use crate::sentinel::flags::SentinelFlags;
pub use crate::split::flags::SplitFlags;
pub use crate::tls::flags::TlsFlags;
pub use crate::workers::flags::WorkerFlags;

use crate::config::{ConfigErrors, PoolConfig, ProxyConfig};
use crate::RunOptions;

/// A feature's flags as they set the pools' settings: which protocols' pools they serve, what they
/// set there, and which of their combinations are refused.
pub trait ApplyToPools {
    /// Sets what these flags set on each of `pools` (the file's pools, as read).
    ///
    /// # Errors
    /// Every problem of the flags themselves: one that names a pool the file does not have (a typo
    /// would otherwise set nothing), or a pool of a protocol it does not serve; flags that go
    /// together given apart. The pools' settings are checked afterwards, all together
    /// ([`ProxyConfig::validate`]).
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors>;

    /// What only the finished pools can tell, once every group has applied itself and the pools'
    /// settings are valid (the TLS group reads its files). By default, nothing.
    ///
    /// # Errors
    /// Every problem found.
    fn check(&self, _pools: &[PoolConfig]) -> Result<(), ConfigErrors> {
        Ok(())
    }

    /// The flags given for every pool that some of `pools` do not take, because they serve only the
    /// other protocol: one line a pool, for the user, since they are not an error. By default, none.
    fn unused(&self, _pools: &[PoolConfig]) -> Vec<String> {
        Vec::new()
    }
}

/// Every feature's flags, in `--help`'s order; `shardring proxy` flattens them after nutcracker's
/// own flags. [`Default`] is a command line with none of them.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct ProxyFlags {
    /// `--metrics-addr`: the HTTP listener beside the stats port.
    #[command(flatten)]
    pub metrics: MetricsFlags,
    /// `--threads`: how many workers serve clients.
    #[command(flatten)]
    pub workers: WorkerFlags,
    /// `--max-value-size`, `--max-request-size`: both protocols' request limits.
    #[command(flatten)]
    pub limits: LimitFlags,
    /// `--multiget-all-or-nothing`: memcached pools' multi-gets.
    #[command(flatten)]
    pub memcache: MemcacheFlags,
    /// `--health-check-interval`: every pool's server probes.
    #[command(flatten)]
    pub health: HealthCheckFlags,
    /// `--circuit-breakers` and its tuning: every pool's servers.
    #[command(flatten)]
    pub breakers: BreakerFlags,
    /// `--etcd` and its companions: where the pools' servers come from.
    #[cfg(feature = "etcd")]
    #[command(flatten)]
    pub membership: MembershipFlags,
    /// `--hot-keys` and the hot-key cache: both protocols' pools.
    #[command(flatten)]
    pub hot_keys: HotKeyFlags,
    /// `--key-rate-limit`, `--pool-rate-limit`: both protocols' pools.
    #[command(flatten)]
    pub rate_limits: RateLimitFlags,
    /// `--hot-key-split`, `--hot-key-split-keys`: split keys, memcached pools.
    #[command(flatten)]
    pub split: SplitFlags,
    /// `--replicas`, `--gutter`, `--warmup-window`: the memcached remedies.
    #[command(flatten)]
    pub remedies: RemedyFlags,
    /// `--redis-*`: redis pools' own settings.
    #[command(flatten)]
    pub redis: RedisFlags,
    /// `--tls-*`, `--server-*`: TLS on the listeners and to the servers.
    #[command(flatten)]
    pub tls: TlsFlags,
    /// `--sentinel`, `--sentinel-auth`: redis pools' Sentinels.
    #[command(flatten)]
    pub sentinel: SentinelFlags,
    /// `--redis-cluster`, `--redis-cluster-refresh`: redis pools that are Redis Clusters.
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

impl ProxyFlags {
    /// The groups that set the pools' settings, in the order they apply.
    fn pool_groups(&self) -> [&dyn ApplyToPools; 12] {
        [
            &self.limits,
            &self.memcache,
            &self.health,
            &self.breakers,
            &self.hot_keys,
            &self.rate_limits,
            &self.split,
            &self.remedies,
            &self.redis,
            &self.tls,
            &self.sentinel,
            &self.cluster,
        ]
    }

    /// `config` with every group's settings on its pools, checked whole.
    ///
    /// # Errors
    /// Every problem: the pools' settings checked with the flags' values in them
    /// ([`ProxyConfig::validate`]), then the flags' own ([`ApplyToPools::apply`]); when there are
    /// none, what only the finished pools tell ([`ApplyToPools::check`]).
    pub fn apply(&self, mut config: ProxyConfig) -> Result<ProxyConfig, ConfigErrors> {
        let mut flag_errors = ConfigErrors::default();
        for group in self.pool_groups() {
            if let Err(e) = group.apply(&mut config.pools) {
                flag_errors.problems.extend(e.problems);
            }
        }
        // Each pool's problems together, in the file's order, then those of no pool (a flag that
        // names a pool the file does not have), as the settings' own are listed.
        let pools = &config.pools;
        flag_errors.problems.sort_by_key(|p| {
            pools
                .iter()
                .position(|pool| pool.name == p.key)
                .unwrap_or(pools.len())
        });
        let mut errors = config.validate().err().unwrap_or_default();
        errors.problems.extend(flag_errors.problems);
        if errors.problems.is_empty() {
            for group in self.pool_groups() {
                if let Err(e) = group.check(&config.pools) {
                    errors.problems.extend(e.problems);
                }
            }
        }
        errors.into_result().map(|()| config)
    }

    /// The flags given for every pool that some pools of `config` do not take, one line a pool and
    /// group ([`ApplyToPools::unused`]); nothing when there are none.
    pub fn unused(&self, config: &ProxyConfig) -> Vec<String> {
        self.pool_groups()
            .iter()
            .flat_map(|group| group.unused(&config.pools))
            .collect()
    }

    /// How the process runs as the flags ask: its workers (call this once the log is up: more
    /// workers than CPUs are warned of), its metrics listener and, with `--etcd`, where the pools'
    /// servers come from. The rest is [`RunOptions::default`]'s, for the caller to set.
    pub fn run_options(&self) -> RunOptions {
        RunOptions {
            workers: self.workers.workers(),
            metrics_addr: self.metrics.metrics_addr.clone(),
            #[cfg(feature = "etcd")]
            membership: self.membership.membership(),
            ..RunOptions::default()
        }
    }
}
