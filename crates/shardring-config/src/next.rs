//! A pool's *next* membership (*proxy-only*): the servers, and how keys are placed on them, that the
//! pool will have after a planned change. It comes from a second file (`shardring proxy
//! --next-config FILE`: the pool of the same name there) or from etcd (`next/` beside `servers/`).
//!
//! While the next membership places keys differently from the current one, the proxy dual-writes:
//! every write of a key whose owner changes goes to its owner now and to its owner next, so that
//! `shardring migrate` can copy the keys without losing a write made meanwhile. Reads stay on the
//! owner now. Which memberships a proxy serves is reported as [`PlacementSpec::digest`]s, which
//! `shardring migrate` compares across proxies before it copies and after it cuts over.

use shardring::compat::twemproxy::{Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;

use super::placement::PlacementSpec;
use super::{ClusterConfig, Membership};

/// The placement a pool will have next. ([`NextMembership::of`] is beside [`super::PoolConfig`],
/// which this module does not import: the pool holds its next membership, not the other way.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextMembership {
    /// The servers, in the next file's order (placement sorts them by identity, as nutcracker does).
    pub servers: Vec<TwemproxyServer>,
    /// `hash`.
    pub hash: TwemproxyHash,
    /// `hash_tag`.
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution`.
    pub distribution: Distribution,
    /// When the next membership is a Redis Cluster (its file marks the pool: `cluster_mark`): its
    /// seeds, and its slot map once the proxy has read it. `servers` are then the seeds until the
    /// map is read, and the masters after. Keys go by its slot map; no dual write is made (and the
    /// next membership is not reported) before the map is read.
    pub cluster: Option<ClusterConfig>,
}

impl NextMembership {
    /// The next placement's settings.
    pub fn placement_spec(&self) -> PlacementSpec<'_> {
        PlacementSpec {
            servers: &self.servers,
            hash: self.hash,
            hash_tag: self.hash_tag,
            distribution: self.distribution,
        }
    }

    /// What this membership is, as reported and compared.
    pub fn membership(&self) -> Membership<'_> {
        match &self.cluster {
            Some(c) => Membership::Cluster(&c.seeds),
            None => Membership::Ring(self.placement_spec()),
        }
    }

    /// Whether keys can be placed by it: a ring always, a cluster once its slot map is read.
    pub fn placeable(&self) -> bool {
        self.cluster.as_ref().is_none_or(|c| c.slots.is_some())
    }
}
