//! The cluster flags (`--redis-cluster`, `--redis-cluster-refresh`): a redis pool whose servers are a
//! Redis Cluster's seed nodes. Redis pools only: a memcached pool named by one is refused.

use std::time::Duration;

use crate::config::{ClusterConfig, ConfigErrors, PoolConfig, ProtocolConfig, ReadPolicy};
use crate::flags::per_pool::{parse_pool_switch, refuse_unknown, switched_on, switches_named};
use crate::flags::ApplyToPools;

/// The redis pools that are clusters. [`Default`]: none.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct ClusterFlags {
    /// Redis pools: the pool's servers are Redis Cluster seed nodes; keys go by the cluster's slot
    /// map (CRC16 of the key or its {hash tag}), MOVED and ASK are followed inside the proxy, and
    /// the masters become the pool's servers. Every redis pool, or `=POOL`.
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch)]
    pub redis_cluster: Vec<Option<String>>,
    /// Cluster pools: read the slot map again this often (milliseconds) when no redirection asks
    /// sooner. [default: 2000]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_cluster_refresh: Option<u64>,
    /// Cluster pools: where reads go: `master` (every read sees every acknowledged write),
    /// `prefer-replica` (a replica of the slot's master, the master when it has none or the
    /// replica fails) or `any` (spread over the master and its replicas). Replication is
    /// asynchronous: a replica may not have a write its master acknowledged a moment ago. Sends
    /// READONLY on every server connection. [default: master]
    #[arg(long, value_name = "POLICY", value_parser = parse_reads)]
    pub redis_cluster_reads: Option<ReadPolicy>,
}

/// `master`, `prefer-replica` or `any`.
fn parse_reads(text: &str) -> Result<ReadPolicy, String> {
    match text {
        "master" => Ok(ReadPolicy::Master),
        "prefer-replica" => Ok(ReadPolicy::PreferReplica),
        "any" => Ok(ReadPolicy::Any),
        _ => Err(format!(
            "not a read policy: {text:?} (master, prefer-replica or any)"
        )),
    }
}

impl ApplyToPools for ClusterFlags {
    /// Every redis pool, or the ones named.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for pool in pools.iter_mut() {
            let name = pool.name.clone();
            let seeds: Vec<String> = pool
                .servers
                .iter()
                .map(shardring::compat::twemproxy::TwemproxyServer::address)
                .collect();
            let on = switched_on(&self.redis_cluster, &name);
            match &mut pool.protocol {
                ProtocolConfig::Memcache(_) => {
                    if switches_named(&self.redis_cluster).any(|p| p == name) {
                        errors.push(
                            &name,
                            "--redis-cluster: redis pools only, and this is a memcached pool"
                                .into(),
                        );
                    }
                }
                // A pool its file marks (`# shardring: redis-cluster`) is one without the switch.
                ProtocolConfig::Redis(r) if on || r.cluster.is_some() => {
                    let cluster = r.cluster.get_or_insert_with(|| ClusterConfig::new(seeds));
                    if let Some(ms) = self.redis_cluster_refresh {
                        cluster.refresh = Duration::from_millis(ms);
                    }
                    if let Some(reads) = self.redis_cluster_reads {
                        cluster.reads = reads;
                    }
                }
                ProtocolConfig::Redis(_) => {}
            }
        }
        refuse_unknown(
            "--redis-cluster",
            switches_named(&self.redis_cluster),
            pools,
            &mut errors,
        );
        errors.into_result()
    }
}
