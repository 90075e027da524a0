//! A pool's config with etcd's member sets in it: `servers/` as the pool's servers and `next/` as
//! its next membership, each a ring or a Redis Cluster's seeds as its kind says
//! ([`shardring_etcd::layout`]'s `kind` and `next-kind`).
//!
//! A cluster's seeds are only where its slot map is read: a set that is the cluster the pool
//! already serves (or already dual-writes to) keeps the masters and slots read for it, so that a
//! cut-over onto a cluster serves at once by the map read while it was the next membership, and
//! an unchanged cluster is not asked again.

use shardring::compat::twemproxy::TwemproxyServer;
use shardring::membership::MembershipSnapshot;
use shardring_etcd::{twemproxy_servers, Kind, Kinds};

use crate::config::{ClusterConfig, Membership, NextMembership, PoolConfig};

/// The seeds of a cluster set: its servers' addresses.
fn seeds_of(servers: &[TwemproxyServer]) -> Vec<String> {
    servers.iter().map(TwemproxyServer::address).collect()
}

/// The same cluster: the same membership digest (its seeds, in any order), as proxies report and
/// `migrate` compares it.
fn same_seeds(a: &[String], b: &[String]) -> bool {
    Membership::Cluster(a).digest() == Membership::Cluster(b).digest()
}

/// `running` with etcd's `current` set (of `kinds.current`) as its servers and `next` (of
/// `kinds.next`) as its next membership. A next set of a kind this proxy cannot read is left out
/// (no dual write is made to it, and it is not reported: a migration waits).
///
/// # Errors
/// Why the current set cannot be served: a kind this proxy cannot read, a cluster for a memcached
/// pool, a server that is not a server line.
pub(super) fn with_sets(
    running: &PoolConfig,
    current: &MembershipSnapshot,
    next: Option<&MembershipSnapshot>,
    kinds: Kinds,
) -> Result<PoolConfig, String> {
    let mut config = running.clone();
    let servers = twemproxy_servers(current.members()).map_err(|e| e.to_string())?;
    match kinds.current {
        Kind::Ring => {
            config.servers = servers;
            if let Some(r) = config.redis_mut() {
                r.cluster = None;
            }
        }
        Kind::RedisCluster => {
            let seeds = seeds_of(&servers);
            let kept = running.cluster().filter(|c| same_seeds(&c.seeds, &seeds));
            let was_next = running
                .next
                .as_ref()
                .and_then(|n| Some((n, n.cluster.as_ref()?)))
                .filter(|(_, c)| same_seeds(&c.seeds, &seeds) && c.slots.is_some());
            let settings = running
                .cluster()
                .cloned()
                .unwrap_or_else(|| ClusterConfig::new(Vec::new()));
            let cluster = match (kept, was_next) {
                (Some(_), _) => None,
                (None, Some((n, c))) => {
                    config.servers = n.servers.clone();
                    Some(ClusterConfig {
                        seeds,
                        slots: c.slots.clone(),
                        ..settings
                    })
                }
                (None, None) => {
                    config.servers = servers;
                    Some(ClusterConfig {
                        seeds,
                        slots: None,
                        ..settings
                    })
                }
            };
            let redis = config.redis_mut().ok_or_else(|| {
                "etcd's `kind` key says a Redis Cluster, and this is a memcached pool".to_owned()
            })?;
            if let Some(cluster) = cluster {
                redis.cluster = Some(cluster);
            }
        }
        other => {
            return Err(format!(
                "etcd's `kind` key says {other}, which this proxy cannot place"
            ))
        }
    }
    config.next = match (next, kinds.next) {
        (None, _) => None,
        (Some(n), Kind::Ring) => Some(NextMembership {
            servers: twemproxy_servers(n.members()).map_err(|e| e.to_string())?,
            cluster: None,
            ..NextMembership::of(&config)
        }),
        (Some(n), Kind::RedisCluster) => {
            let servers = twemproxy_servers(n.members()).map_err(|e| e.to_string())?;
            let seeds = seeds_of(&servers);
            match running.next.as_ref().filter(|was| {
                was.cluster
                    .as_ref()
                    .is_some_and(|c| same_seeds(&c.seeds, &seeds))
            }) {
                // The cluster it dual-writes to already: its masters and map stay.
                Some(was) => Some(NextMembership {
                    servers: was.servers.clone(),
                    cluster: was.cluster.clone(),
                    ..NextMembership::of(&config)
                }),
                None => Some(NextMembership {
                    servers,
                    cluster: Some(ClusterConfig::new(seeds)),
                    ..NextMembership::of(&config)
                }),
            }
        }
        (Some(_), _) => None,
    };
    Ok(config)
}

/// Whether `config` has a cluster whose slot map is not read yet (its follower is then woken).
pub(super) fn unmapped_cluster(config: &PoolConfig) -> bool {
    config.cluster().is_some_and(|c| c.slots.is_none())
        || config.next.as_ref().is_some_and(|n| !n.placeable())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shardring::membership::Member;

    use super::*;
    use crate::config::{ProtocolConfig, RedisConfig, SlotTable};

    fn snapshot(addrs: &[&str]) -> MembershipSnapshot {
        MembershipSnapshot::new(
            3,
            addrs
                .iter()
                .map(|a| Member::new(*a, *a, 1).expect("member"))
                .collect(),
        )
        .expect("snapshot")
    }

    fn redis_pool() -> PoolConfig {
        let mut pool = PoolConfig::new(
            "r",
            "127.0.0.1:0",
            &["127.0.0.1:6001:1", "127.0.0.1:6002:1"],
        )
        .expect("pool");
        pool.protocol = ProtocolConfig::Redis(RedisConfig::default());
        pool
    }

    const RING: Kinds = Kinds {
        current: Kind::Ring,
        next: Kind::Ring,
    };
    const ONTO_CLUSTER: Kinds = Kinds {
        current: Kind::Ring,
        next: Kind::RedisCluster,
    };
    const CUT_OVER: Kinds = Kinds {
        current: Kind::RedisCluster,
        next: Kind::Ring,
    };

    #[test]
    fn a_cluster_next_is_unmapped_until_read_and_its_map_serves_at_the_cut_over() {
        let ring = snapshot(&["127.0.0.1:6001", "127.0.0.1:6002"]);
        let seeds = snapshot(&["127.0.0.1:7001", "127.0.0.1:7000"]);
        let running = redis_pool();
        let planned = with_sets(&running, &ring, Some(&seeds), ONTO_CLUSTER).expect("planned");
        let next = planned.next.as_ref().expect("next");
        assert!(next.cluster.is_some() && !next.placeable());
        assert!(
            planned.planned_change().is_none(),
            "not reported before its map is read"
        );
        assert!(unmapped_cluster(&planned));

        // The follower reads the map: the next membership's servers are the masters.
        let mut mapped = planned.clone();
        let n = mapped.next.as_mut().expect("next");
        n.servers = vec![TwemproxyServer {
            host: "127.0.0.1".into(),
            port: 7002,
            weight: 1,
            name: None,
        }];
        let mut table = SlotTable::default();
        table.assign(0, 16383, 0);
        n.cluster.as_mut().expect("cluster").slots = Some(Arc::new(table));
        // etcd again (the seeds in another order): the map stays.
        let again = with_sets(
            &mapped,
            &ring,
            Some(&snapshot(&["127.0.0.1:7000", "127.0.0.1:7001"])),
            ONTO_CLUSTER,
        )
        .expect("again");
        assert_eq!(again.next, mapped.next);
        assert!(again.planned_change().is_some());

        // The cut-over: the cluster is current, served at once by the map read as next.
        let cut = with_sets(&mapped, &seeds, Some(&ring), CUT_OVER).expect("cut over");
        let cluster = cut.cluster().expect("a cluster pool");
        assert!(cluster.slots.is_some());
        assert_eq!(cut.servers[0].port, 7002);
        assert_eq!(cut.next.as_ref().expect("old ring").servers.len(), 2);
        assert!(!unmapped_cluster(&cut));
        // And the drop: the cluster stays as it is.
        let done = with_sets(&cut, &seeds, None, CUT_OVER).expect("done");
        assert_eq!((done.cluster(), done.next.is_none()), (cut.cluster(), true));
        assert_eq!(done.servers, cut.servers);
        // Back to a ring (a publication of one): no cluster any more.
        let ring_again = with_sets(&done, &ring, None, RING).expect("ring");
        assert!(ring_again.cluster().is_none());
        assert_eq!(ring_again.servers.len(), 2);
    }

    #[test]
    fn kinds_a_pool_cannot_serve_are_refused_or_left_out() {
        let ring = snapshot(&["127.0.0.1:6001"]);
        let unknown = Kinds {
            current: Kind::Unknown,
            next: Kind::Ring,
        };
        assert!(with_sets(&redis_pool(), &ring, None, unknown).is_err());
        let mc = PoolConfig::new("m", "127.0.0.1:0", &["127.0.0.1:11211:1"]).expect("pool");
        let err = with_sets(&mc, &ring, None, CUT_OVER).unwrap_err();
        assert!(err.contains("memcached"), "{err}");
        let unknown_next = Kinds {
            current: Kind::Ring,
            next: Kind::Unknown,
        };
        let left_out =
            with_sets(&redis_pool(), &ring, Some(&ring), unknown_next).expect("current served");
        assert!(left_out.next.is_none());
        // A cluster that is new to the pool: its seeds until its map is read.
        let fresh = with_sets(&redis_pool(), &ring, None, CUT_OVER).expect("a new cluster");
        assert!(unmapped_cluster(&fresh));
        assert_eq!(
            fresh.cluster().map(|c| c.seeds.clone()),
            Some(vec!["127.0.0.1:6001".to_owned()])
        );
    }
}
