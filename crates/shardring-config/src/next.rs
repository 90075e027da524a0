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
}
