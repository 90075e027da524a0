//! Following each cluster pool's slot map: read before the first client is served, again on a
//! schedule and whenever a request finds it stale, applied as a pool reload when it changed.
//!
//! Which node is asked: the pool's masters as last known, then the seeds (the file's servers),
//! several at once; the answer that serves the most slots wins (during a failover a node that has
//! not heard of it yet still names the dead master; a map that names the new one serves as many
//! slots, and the next read settles it). Once one node has answered, the others get 50 ms: a node
//! that cannot answer (paused) costs that, not its timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use shardring::compat::twemproxy::TwemproxyServer;
use tokio_util::sync::CancellationToken;

use super::map::{ClusterMap, Ports};
use super::node::NodeAccess;
use crate::config::{PoolConfig, ProxyConfig, ReadPolicy};
use crate::pool::ServedPool;

/// The least time between two reads of a map: a burst of redirections asks once.
const MIN_GAP: Duration = Duration::from_millis(100);

/// How long a read of the map waits for the other nodes' answers once one has given a map.
const GRACE: Duration = Duration::from_millis(50);

/// How many nodes one read asks at once.
const ASKED_AT_ONCE: usize = 4;

/// Each followed pool's map as last applied, by pool name: what a file reload keeps.
#[derive(Debug, Default, Clone)]
pub struct ClusterFollowers {
    maps: Arc<Mutex<HashMap<String, ClusterMap>>>,
}

impl ClusterFollowers {
    /// `config` with every followed pool's servers and slots as the cluster last said (a SIGHUP
    /// re-reads the file, whose servers are the seeds).
    pub fn keep_maps(&self, mut config: ProxyConfig) -> ProxyConfig {
        let Ok(maps) = self.maps.lock() else {
            return config;
        };
        for pool in &mut config.pools {
            if let Some(map) = maps.get(&pool.name) {
                with_map(pool, map);
            }
        }
        config
    }
}

/// `pool` with `map`'s masters (and their replicas, when reads may go there) as its servers and its
/// slots as the placement; `false` when it had them already.
fn with_map(pool: &mut PoolConfig, map: &ClusterMap) -> bool {
    // A pool that reads from masters only opens no connection to a replica.
    let masters_only;
    let map = match pool.cluster().map(|c| c.reads) {
        Some(ReadPolicy::Master) | None => {
            masters_only = ClusterMap {
                replicas: Vec::new(),
                ..map.clone()
            };
            &masters_only
        }
        Some(_) => map,
    };
    let servers: Vec<TwemproxyServer> = map.servers().filter_map(server).collect();
    let table = Arc::new(map.table());
    let same_slots = pool
        .cluster()
        .is_some_and(|c| c.slots.as_deref() == Some(&*table));
    if pool.servers == servers && same_slots {
        return false;
    }
    let Some(cluster) = pool.redis_mut().and_then(|r| r.cluster.as_mut()) else {
        return false;
    };
    cluster.slots = Some(table);
    pool.servers = servers;
    true
}

/// A master's `host:port` as a server line (weight 1: a cluster weighs nothing).
fn server(addr: &str) -> Option<TwemproxyServer> {
    let (host, port) = addr.rsplit_once(':')?;
    Some(TwemproxyServer {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port: port.parse().ok()?,
        weight: 1,
        name: None,
    })
}

/// Reads `pool`'s map once and applies it; the error when no node gave one.
async fn refresh(
    pool: &dyn ServedPool,
    access: &NodeAccess,
    followers: &ClusterFollowers,
    turn: &mut usize,
) -> Result<(), String> {
    let config = pool.config();
    let Some(cluster) = config.cluster() else {
        return Ok(());
    };
    let mut candidates: Vec<String> = config
        .servers
        .iter()
        .map(TwemproxyServer::address)
        .collect();
    for s in &cluster.seeds {
        if !candidates.contains(s) {
            candidates.push(s.clone());
        }
    }
    // A different few each read, so a node that is down is not asked first every time.
    let start = *turn % candidates.len().max(1);
    *turn = turn.wrapping_add(1);
    candidates.rotate_left(start);
    let mut last_error = String::from("no node to ask");
    for batch in candidates.chunks(ASKED_AT_ONCE) {
        let mut asks: FuturesUnordered<_> = batch
            .iter()
            .map(|a| async move { (a, access.slot_map(a).await) })
            .collect();
        let mut best: Option<(ClusterMap, usize)> = None;
        // The answers as they come; once one gave a map, the others get a short grace, not their
        // whole timeout (a paused node would hold every read of the map up by it).
        let mut grace = None;
        loop {
            let next = match grace {
                None => asks.next().await,
                Some(until) => match tokio::time::timeout_at(until, asks.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            let Some((addr, answer)) = next else { break };
            match answer {
                Ok(map) => {
                    let served = map.served();
                    if served > best.as_ref().map_or(0, |(_, s)| *s) {
                        best = Some((map, served));
                    }
                    grace.get_or_insert_with(|| tokio::time::Instant::now() + GRACE);
                }
                Err(e) => last_error = format!("{addr}: {e}"),
            }
        }
        if let Some((map, served)) = best {
            apply(pool, &map, served, followers);
            return Ok(());
        }
    }
    Err(last_error)
}

/// Reloads `pool` with `map` (which serves `served` slots) when it differs from what the pool runs.
fn apply(pool: &dyn ServedPool, map: &ClusterMap, served: usize, followers: &ClusterFollowers) {
    let mut config = pool.config();
    if let Ok(mut maps) = followers.maps.lock() {
        maps.insert(config.name.clone(), map.clone());
    }
    if !with_map(&mut config, map) {
        return;
    }
    match pool.reload(config.clone()) {
        Ok(()) => {
            pool.cluster_signal().changed();
            tracing::info!(pool = %config.name, masters = map.masters.len(), served, "cluster slot map applied");
        }
        Err(e) => {
            tracing::error!(pool = %config.name, error = %e, "cannot apply the cluster's slot map")
        }
    }
}

/// Starts following every cluster pool: reads each map now (before the first client), then spawns
/// a follower per pool until `stop`.
pub async fn start(pools: &[Arc<dyn ServedPool>], stop: CancellationToken) -> ClusterFollowers {
    let followers = ClusterFollowers::default();
    for pool in pools {
        let config = pool.config();
        let (Some(cluster), Some(redis)) = (config.cluster(), config.redis()) else {
            continue;
        };
        let tls = pool.tls().servers;
        let access = NodeAccess {
            ports: if tls.is_some() {
                Ports::Tls
            } else {
                Ports::Plain
            },
            connect: crate::sentinel::follow::connector(tls),
            auth: redis.auth.clone().map(|p| (redis.user.clone(), p)),
            timeout: config.timeout.unwrap_or(Duration::from_secs(1)),
        };
        let every = cluster.refresh;
        let mut turn = 0;
        if let Err(e) = refresh(pool.as_ref(), &access, &followers, &mut turn).await {
            tracing::error!(pool = %config.name, error = %e, "no cluster node gave its slot map yet: every key is refused until one does");
        }
        let (pool, followers, stop) = (Arc::clone(pool), followers.clone(), stop.clone());
        tokio::spawn(async move {
            let signal = pool.cluster_signal();
            let mut failing = false;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                    () = signal.wait_stale() => {}
                }
                match refresh(pool.as_ref(), &access, &followers, &mut turn).await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(pool = %pool.config().name, error = %e, "no cluster node gave its slot map: the last one stays");
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(MIN_GAP).await;
            }
        });
    }
    followers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterConfig;

    #[test]
    fn a_map_becomes_the_pools_servers_and_slots_and_the_same_map_changes_nothing() {
        let mut pool = PoolConfig::new("c", "127.0.0.1:0", &["127.0.0.1:7000:1"]).expect("pool");
        let mut cluster = ClusterConfig::new(vec!["127.0.0.1:7000".into()]);
        cluster.reads = ReadPolicy::PreferReplica;
        pool.protocol = crate::config::ProtocolConfig::Redis(crate::config::RedisConfig {
            cluster: Some(cluster),
            ..Default::default()
        });
        let map = ClusterMap {
            masters: vec!["127.0.0.1:7001".into(), "[::1]:7002".into()],
            ranges: vec![(0, 100, 0), (101, 16383, 1)],
            replicas: vec![("127.0.0.1:7004".into(), 0)],
        };
        assert!(with_map(&mut pool, &map));
        assert_eq!(pool.servers.len(), 3);
        assert_eq!(pool.servers[2].port, 7004);
        assert_eq!(pool.servers[1].host, "::1");
        assert_eq!(pool.servers[1].port, 7002);
        assert!(!with_map(&mut pool, &map));
        let slots = pool.cluster().and_then(|c| c.slots.clone()).expect("slots");
        assert_eq!(slots.owner(100), Some(0));
        assert_eq!(slots.owner(101), Some(1));
        assert_eq!(slots.replicas_of(0).collect::<Vec<_>>(), [2]);
        assert!(!slots.serves_any(2));
    }
}
