//! A Redis Cluster pool's settings ([`ClusterConfig`]): its seed nodes, how often the proxy reads
//! the cluster's slot map, and the map as last read ([`SlotTable`]), which places keys instead of
//! the pool's ring. Set by `shardring proxy --redis-cluster` (nutcracker has no such key, and
//! refuses unknown keys); the proxy's `cluster/` follows the map.

use std::sync::Arc;
use std::time::Duration;

use super::problem::ConfigErrors;
use super::{PlacementSpec, RedisConfig};

/// How many hash slots a Redis Cluster has (`CLUSTER KEYSLOT` is CRC16 of the key, or of its hash
/// tag, modulo this).
pub const SLOTS: usize = 16384;

/// A redis pool whose servers are a Redis Cluster's seed nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The nodes the file names (`host:port`): asked for the slot map when no node of the map
    /// answers, and at start.
    pub seeds: Vec<String>,
    /// How often the slot map is read again when nothing asks sooner (a redirection, a failed
    /// master ask at once). `--redis-cluster-refresh MS`; by default, this is 2 s.
    pub refresh: Duration,
    /// The slot map as last read; `None` until one is: every key is then refused with an error
    /// saying so, as for a slot no master serves.
    pub slots: Option<Arc<SlotTable>>,
    /// Where reads go. `--redis-cluster-reads`; by default, [`ReadPolicy::Master`].
    pub reads: ReadPolicy,
}

/// Where a cluster pool's reads go (Envoy's `read_policy`). Replication is asynchronous: a read from
/// a replica may miss a write its master acknowledged a moment before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadPolicy {
    /// Every request to the slot's master (the default: a read sees every acknowledged write).
    #[default]
    Master,
    /// Reads to a replica of the slot's master (chosen per request), the master when it has none
    /// or the replica fails.
    PreferReplica,
    /// Reads spread over the master and its replicas.
    Any,
}

impl ClusterConfig {
    /// The default of [`ClusterConfig::refresh`].
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(2);

    /// Every problem with a cluster pool named `name`, whose other redis settings are `redis`,
    /// placed by `pool` (whose ring the slot map replaces).
    pub(crate) fn validate(
        &self,
        name: &str,
        redis: &RedisConfig,
        pool: PlacementSpec<'_>,
        errors: &mut ConfigErrors,
    ) {
        if self.seeds.is_empty() {
            errors.push(name, "--redis-cluster: at least one seed node".into());
        }
        if self.refresh < Duration::from_millis(100) {
            errors.push(
                name,
                "--redis-cluster-refresh: at least 100 ms between reads of the slot map".into(),
            );
        }
        if redis.db != 0 {
            errors.push(
                name,
                format!(
                    "redis_db: {}: a Redis Cluster has database 0 only (remove redis_db, or --redis-cluster)",
                    redis.db
                ),
            );
        }
        if redis.sentinel.is_some() {
            errors.push(
                name,
                "--sentinel and --redis-cluster: a cluster follows its own failovers, use one"
                    .into(),
            );
        }
        if pool.hash_tag.is_some_and(|t| t != *b"{}") {
            errors.push(
                name,
                "hash_tag: a cluster pool places keys by Redis Cluster's own {hash tags}; set hash_tag: \"{}\" or none"
                    .into(),
            );
        }
    }

    /// A cluster reached through `seeds`, its map not read yet.
    pub fn new(seeds: Vec<String>) -> ClusterConfig {
        ClusterConfig {
            seeds,
            refresh: ClusterConfig::DEFAULT_REFRESH,
            slots: None,
            reads: ReadPolicy::Master,
        }
    }
}

/// Which server of the pool (index in its server list: the cluster's masters, then their replicas)
/// serves each slot, and each master's replicas.
#[derive(Clone, PartialEq, Eq)]
pub struct SlotTable {
    /// By slot: the server's index, or [`SlotTable::NONE`].
    owners: Box<[u16]>,
    /// By master's index: its replicas' indices.
    replicas: Vec<Vec<u16>>,
}

impl std::fmt::Debug for SlotTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let served = self
            .owners
            .iter()
            .filter(|&&o| o != SlotTable::NONE)
            .count();
        f.debug_struct("SlotTable")
            .field("served", &served)
            .finish_non_exhaustive()
    }
}

impl Default for SlotTable {
    fn default() -> SlotTable {
        SlotTable {
            owners: vec![SlotTable::NONE; SLOTS].into_boxed_slice(),
            replicas: Vec::new(),
        }
    }
}

impl SlotTable {
    /// The mark of a slot no server serves.
    const NONE: u16 = u16::MAX;

    /// Serves `slots` (a range, both ends included; out of range parts ignored) from server
    /// `server`; a server index past `u16::MAX - 1` is ignored (no cluster has that many masters).
    pub fn assign(&mut self, first: usize, last: usize, server: usize) {
        let Ok(server) = u16::try_from(server) else {
            return;
        };
        if server == SlotTable::NONE || first > last {
            return;
        }
        let last = last.min(SLOTS - 1);
        if let Some(range) = self.owners.get_mut(first..=last) {
            range.fill(server);
        }
    }

    /// The server (index in the pool's server list) that serves `slot`, if any.
    #[inline]
    pub fn owner(&self, slot: usize) -> Option<usize> {
        match self.owners.get(slot) {
            Some(&o) if o != SlotTable::NONE => Some(usize::from(o)),
            _ => None,
        }
    }

    /// Records server `replica` as a replica of server `master` (indices past `u16::MAX - 1`
    /// ignored).
    pub fn add_replica(&mut self, master: usize, replica: usize) {
        let Ok(r) = u16::try_from(replica) else {
            return;
        };
        if r == SlotTable::NONE || master >= usize::from(SlotTable::NONE) {
            return;
        }
        if self.replicas.len() <= master {
            self.replicas.resize(master + 1, Vec::new());
        }
        self.replicas[master].push(r);
    }

    /// The replicas of server `master` (indices in the pool's server list).
    pub fn replicas_of(&self, master: usize) -> impl Iterator<Item = usize> + '_ {
        self.replicas
            .get(master)
            .into_iter()
            .flatten()
            .map(|&r| usize::from(r))
    }

    /// Whether server `server` serves at least one slot.
    pub fn serves_any(&self, server: usize) -> bool {
        u16::try_from(server).is_ok_and(|s| s != SlotTable::NONE && self.owners.contains(&s))
    }

    /// This table with each server index `i` as `to[i]` (an index `to` lacks, or one past
    /// `u16::MAX - 1`, serves nothing): a next membership's map over the pool's own server list.
    pub fn renumbered(&self, to: &[usize]) -> SlotTable {
        let map = |o: u16| {
            to.get(usize::from(o))
                .and_then(|&i| u16::try_from(i).ok())
                .filter(|&i| i != SlotTable::NONE)
                .unwrap_or(SlotTable::NONE)
        };
        let mut out = SlotTable {
            owners: self
                .owners
                .iter()
                .map(|&o| if o == SlotTable::NONE { o } else { map(o) })
                .collect(),
            replicas: Vec::new(),
        };
        for (master, list) in self.replicas.iter().enumerate() {
            if let Some(&m) = to.get(master) {
                for &r in list {
                    if map(r) != SlotTable::NONE {
                        out.add_replica(m, usize::from(map(r)));
                    }
                }
            }
        }
        out
    }

    /// How many slots some server serves.
    pub fn served(&self) -> usize {
        self.owners
            .iter()
            .filter(|&&o| o != SlotTable::NONE)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_serves_what_was_assigned_and_nothing_else() {
        let mut t = SlotTable::default();
        assert_eq!(t.served(), 0);
        t.assign(0, 5460, 0);
        t.assign(5461, 10922, 2);
        t.assign(10000, 99999, 1);
        t.assign(5, 3, 7);
        t.assign(1, 1, usize::from(u16::MAX));
        assert_eq!(t.owner(0), Some(0));
        assert_eq!(t.owner(1), Some(0));
        assert_eq!(t.owner(5461), Some(2));
        assert_eq!(t.owner(10000), Some(1));
        assert_eq!(t.owner(SLOTS - 1), Some(1));
        assert_eq!(t.owner(SLOTS), None);
        assert_eq!(t.served(), SLOTS);
        let r = t.renumbered(&[5, 9]);
        assert_eq!(r.owner(0), Some(5));
        assert_eq!(r.owner(10000), Some(9));
        assert_eq!(
            r.owner(5461),
            None,
            "a server the map does not have serves nothing"
        );
        assert!(!r.serves_any(0));
    }
}
