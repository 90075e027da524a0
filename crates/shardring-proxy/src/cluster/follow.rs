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
use crate::config::{ClusterConfig, PoolConfig, ProxyConfig, ReadPolicy};
use crate::pool::ServedPool;

/// The least time between two reads of a map: a burst of redirections asks once.
const MIN_GAP: Duration = Duration::from_millis(100);

/// How long a read of the map waits for the other nodes' answers once one has given a map.
const GRACE: Duration = Duration::from_millis(50);

/// How many nodes one read asks at once.
const ASKED_AT_ONCE: usize = 4;

/// Each followed cluster's map as last applied, by its seeds (sorted): what a file reload
/// keeps. By seeds, not by pool: a pool whose next membership was a cluster and whose file now
/// makes that cluster its current one (`shardring migrate`'s cut-over) serves at once by the map
/// it read as next.
#[derive(Debug, Default, Clone)]
pub struct ClusterFollowers {
    maps: Arc<Mutex<HashMap<String, ClusterMap>>>,
}

/// Which of a pool's memberships a cluster is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The pool's own servers: a cluster pool.
    Current,
    /// Its next membership (`--next-config`), while a planned change moves it onto a cluster.
    Next,
}

/// The seeds of the `side` cluster of `pool`, if that membership is a cluster.
fn seeds(pool: &PoolConfig, side: Side) -> Option<&[String]> {
    match side {
        Side::Current => pool.cluster().map(|c| &c.seeds[..]),
        Side::Next => pool
            .next
            .as_ref()
            .and_then(|n| n.cluster.as_ref())
            .map(|c| &c.seeds[..]),
    }
}

/// The key a cluster's map is kept under: its seeds, sorted.
fn seeds_key(seeds: &[String]) -> String {
    let mut sorted: Vec<&str> = seeds.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.join(",")
}

impl ClusterFollowers {
    /// `config` with every followed cluster's servers and slots as the cluster last said (a SIGHUP
    /// re-reads the file, whose servers are the seeds).
    pub fn keep_maps(&self, mut config: ProxyConfig) -> ProxyConfig {
        let Ok(maps) = self.maps.lock() else {
            return config;
        };
        for pool in &mut config.pools {
            for side in [Side::Current, Side::Next] {
                if let Some(map) = seeds(pool, side).and_then(|s| maps.get(&seeds_key(s))) {
                    let map = map.clone();
                    with_map(pool, &map, side);
                }
            }
        }
        config
    }
}

/// `pool` with `map`'s masters (and their replicas, when reads may go there) as the servers of its
/// `side` membership and its slots as that membership's placement; `false` when it had them already.
/// A next membership's replicas are never read (a dual write goes to the masters).
fn with_map(pool: &mut PoolConfig, map: &ClusterMap, side: Side) -> bool {
    // A pool that reads from masters only opens no connection to a replica.
    let masters_only;
    let reads = match side {
        Side::Current => pool.cluster().map(|c| c.reads),
        Side::Next => None,
    };
    let map = match reads {
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
    let (listed, cluster) = match side {
        Side::Current => (&pool.servers, pool.redis().and_then(|r| r.cluster.as_ref())),
        Side::Next => match &pool.next {
            Some(next) => (&next.servers, next.cluster.as_ref()),
            None => return false,
        },
    };
    let Some(cluster) = cluster else {
        return false;
    };
    if *listed == servers && cluster.slots.as_deref() == Some(&*table) {
        return false;
    }
    match side {
        Side::Current => {
            pool.servers = servers;
            if let Some(c) = pool.redis_mut().and_then(|r| r.cluster.as_mut()) {
                c.slots = Some(table);
            }
        }
        Side::Next => {
            if let Some(next) = pool.next.as_mut() {
                next.servers = servers;
                if let Some(c) = next.cluster.as_mut() {
                    c.slots = Some(table);
                }
            }
        }
    }
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

/// Reads the map of `pool`'s `side` cluster once and applies it; the error when no node gave one.
async fn refresh(
    pool: &dyn ServedPool,
    side: Side,
    access: &NodeAccess,
    followers: &ClusterFollowers,
    turn: &mut usize,
) -> Result<(), String> {
    let config = pool.config();
    let Some(seeds) = seeds(&config, side) else {
        return Ok(());
    };
    let known = match side {
        Side::Current => &config.servers[..],
        Side::Next => config.next.as_ref().map_or(&[][..], |n| &n.servers[..]),
    };
    let mut candidates: Vec<String> = known.iter().map(TwemproxyServer::address).collect();
    for s in seeds {
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
            apply(pool, side, &map, served, followers);
            return Ok(());
        }
    }
    Err(last_error)
}

/// Reloads `pool` with `map` (which serves `served` slots) as its `side` cluster's when it differs
/// from what the pool runs.
fn apply(
    pool: &dyn ServedPool,
    side: Side,
    map: &ClusterMap,
    served: usize,
    followers: &ClusterFollowers,
) {
    let mut name = String::new();
    // Read, changed and swapped in with no other reload in between (etcd's membership follower
    // changes the same config).
    let applied = pool.update(&mut |mut config| {
        if let (Some(seeds), Ok(mut maps)) = (seeds(&config, side), followers.maps.lock()) {
            maps.insert(seeds_key(seeds), map.clone());
        }
        name.clone_from(&config.name);
        with_map(&mut config, map, side).then_some(config)
    });
    match applied {
        Ok(true) => {
            pool.cluster_signal().changed();
            tracing::info!(pool = %name, next = side == Side::Next, masters = map.masters.len(), served, "cluster slot map applied");
        }
        Ok(false) => {}
        Err(e) => {
            tracing::error!(pool = %name, error = %e, "cannot apply the cluster's slot map")
        }
    }
}

/// Reads the map of each of `pool`'s memberships that is a cluster; whether each has one now.
async fn refresh_all(
    pool: &dyn ServedPool,
    access: &NodeAccess,
    followers: &ClusterFollowers,
    turn: &mut usize,
    failing: &mut bool,
) -> bool {
    let mut mapped = true;
    for side in [Side::Current, Side::Next] {
        let config = pool.config();
        let Some(these) = seeds(&config, side) else {
            continue;
        };
        // A next membership that is the current cluster (a migration onto it, done) is read once.
        if side == Side::Next
            && seeds(&config, Side::Current).is_some_and(|c| seeds_key(c) == seeds_key(these))
        {
            continue;
        }
        match refresh(pool, side, access, followers, turn).await {
            Ok(()) => *failing = false,
            Err(e) if !*failing => {
                *failing = true;
                let name = pool.config().name;
                match side {
                    Side::Current => {
                        tracing::warn!(pool = %name, error = %e, "no cluster node gave its slot map: the last one stays (none yet: every key is refused)")
                    }
                    Side::Next => {
                        tracing::warn!(pool = %name, error = %e, "no node of the next membership's cluster gave its slot map: no dual write is made, and the next membership is not reported, until one does")
                    }
                }
            }
            Err(_) => {}
        }
        let config = pool.config();
        mapped &= match side {
            Side::Current => config.cluster().is_some_and(|c| c.slots.is_some()),
            Side::Next => config.next.as_ref().is_some_and(|n| n.placeable()),
        };
    }
    mapped
}

/// Starts following every cluster of every redis pool (a cluster pool's, a next membership's):
/// reads each map now (before the first client), then spawns a follower per pool until `stop`.
/// A redis pool that is no cluster yet is followed too: a reload may make it one (a next
/// membership on a cluster, or the cut-over onto it), and its map is then read at once.
pub async fn start(pools: &[Arc<dyn ServedPool>], stop: CancellationToken) -> ClusterFollowers {
    let followers = ClusterFollowers::default();
    for pool in pools {
        let config = pool.config();
        let Some(redis) = config.redis() else {
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
        let mut turn = 0;
        let mut failing = false;
        let mut mapped =
            refresh_all(pool.as_ref(), &access, &followers, &mut turn, &mut failing).await;
        if !mapped && config.cluster().is_some() {
            tracing::error!(pool = %config.name, "no cluster node gave its slot map yet: every key is refused until one does");
        }
        let (pool, followers, stop) = (Arc::clone(pool), followers.clone(), stop.clone());
        tokio::spawn(async move {
            let signal = pool.cluster_signal();
            loop {
                // A membership without its map yet (just made a cluster by a reload, or whose
                // nodes did not answer) is asked again soon, the others on the schedule.
                let every = if mapped {
                    pool.config()
                        .cluster()
                        .map_or(ClusterConfig::DEFAULT_REFRESH, |c| c.refresh)
                } else {
                    MIN_GAP
                };
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                    () = signal.wait_stale() => {}
                }
                mapped =
                    refresh_all(pool.as_ref(), &access, &followers, &mut turn, &mut failing).await;
                tokio::time::sleep(MIN_GAP).await;
            }
        });
    }
    followers
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(with_map(&mut pool, &map, Side::Current));
        assert_eq!(pool.servers.len(), 3);
        assert_eq!(pool.servers[2].port, 7004);
        assert_eq!(pool.servers[1].host, "::1");
        assert_eq!(pool.servers[1].port, 7002);
        assert!(!with_map(&mut pool, &map, Side::Current));
        let slots = pool.cluster().and_then(|c| c.slots.clone()).expect("slots");
        assert_eq!(slots.owner(100), Some(0));
        assert_eq!(slots.owner(101), Some(1));
        assert_eq!(slots.replicas_of(0).collect::<Vec<_>>(), [2]);
        assert!(!slots.serves_any(2));
    }
}
