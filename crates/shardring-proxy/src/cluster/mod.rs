//! Redis Cluster pools (`--redis-cluster`): the pool's servers are seed nodes, and the proxy places
//! keys by the cluster's slot map instead of a ring.
//!
//! - [`follow`] reads the map (`CLUSTER SHARDS`, `CLUSTER SLOTS` on older servers) before the first
//!   client is served, again every `--redis-cluster-refresh` and at once when a request learns that
//!   it is out of date, and reloads the pool with the masters as its servers and the map as its
//!   placement (`router.rs`'s slot routing). A reload that keeps a master keeps its connections.
//! - A request sent by a stale map is redirected by its node (`-MOVED slot host:port`, or `-ASK`
//!   while the slot migrates); the Redis protocol follows it (`protocol/redis/features/cluster.rs`):
//!   the client never sees a redirection, and a `MOVED` asks this module for a new map
//!   (`ClusterSignal::stale`).
//! - A client's requests stay in its order across a new map: a session sends nothing planned with it
//!   while requests planned with the old one are in flight, some of them perhaps to be redirected
//!   (`session`'s `planned_under`).
//!
//! Every master's slot map is a placement like any other to the rest of the proxy: multi-key
//! commands split by it (by slot, which a cluster needs), `SCAN`/`DBSIZE`/`KEYS` span its masters,
//! breakers and health checks watch each master.

pub(crate) mod flags;
pub mod follow;
mod map;
mod node;
pub mod read;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::metrics::PoolStats;

/// What a cluster pool's requests tell its follower, and the tallies both keep (in the pool's
/// stats: `cluster_redirections`, `cluster_map_changes`).
#[derive(Debug)]
pub struct ClusterSignal {
    /// Woken when a request found the map out of date.
    stale: Notify,
    /// How many maps changed the pool so far: what etcd's membership follower watches to report
    /// a next cluster once its map is read (`crate::membership`).
    applied: tokio::sync::watch::Sender<u64>,
    /// The pool's tallies.
    stats: Arc<PoolStats>,
}

impl ClusterSignal {
    /// The signal of the pool whose tallies are `stats`.
    pub(crate) fn new(stats: Arc<PoolStats>) -> ClusterSignal {
        ClusterSignal {
            stale: Notify::new(),
            applied: tokio::sync::watch::Sender::new(0),
            stats,
        }
    }

    /// A request was redirected, or its master failed: read the map again soon.
    pub(crate) fn stale(&self) {
        self.stale.notify_one();
    }

    /// Counts a redirection followed.
    pub(crate) fn redirected(&self) {
        self.stats.cluster_redirections.inc();
    }

    /// Counts a map that changed the pool.
    pub(crate) fn changed(&self) {
        self.stats.cluster_map_changes.inc();
        self.applied.send_modify(|n| *n += 1);
    }

    /// Told of every map that changes the pool from now on.
    pub(crate) fn maps_applied(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Redirections followed so far (`MOVED` and `ASK`).
    pub fn redirections(&self) -> u64 {
        self.stats.cluster_redirections.get()
    }

    /// Slot maps read so far that changed the pool (its masters or their slots).
    pub fn changes(&self) -> u64 {
        self.stats.cluster_map_changes.get()
    }

    /// Until a request finds the map stale.
    pub(crate) async fn wait_stale(&self) {
        self.stale.notified().await;
    }
}
