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

use super::pool::{PlacementSpec, PoolConfig};

/// The placement a pool will have next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextMembership {
    /// The servers, in the next file's order (for `modula` the order places keys).
    pub servers: Vec<TwemproxyServer>,
    /// `hash`.
    pub hash: TwemproxyHash,
    /// `hash_tag`.
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution`.
    pub distribution: Distribution,
}

impl NextMembership {
    /// The placement of `pool` (its servers, hash, hash tag and distribution), as a next membership.
    pub fn of(pool: &PoolConfig) -> NextMembership {
        NextMembership {
            servers: pool.servers.clone(),
            hash: pool.hash,
            hash_tag: pool.hash_tag,
            distribution: pool.distribution,
        }
    }

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

impl PlacementSpec<'_> {
    /// A digest of everything that places keys (each server's host, port, weight and name in order,
    /// the hash, the hash tag and the distribution): two placements with the same digest send every
    /// key to the same server. Not the listen address, which differs between proxies of one pool.
    /// 16 hex digits (xxh3-64 of a canonical text).
    pub fn digest(&self) -> String {
        let mut text = String::new();
        for s in self.servers {
            text.push_str(&s.to_string());
            text.push('\n');
        }
        let tag = self
            .hash_tag
            .map_or_else(String::new, |t| String::from_utf8_lossy(&t).into_owned());
        text.push_str(&format!(
            "hash={} hash_tag={tag} distribution={}\n",
            self.hash, self.distribution
        ));
        format!("{:016x}", shardring::hash::xxh3_64(text.as_bytes()))
    }

    /// Whether `other` may place keys differently from this placement only by which servers it
    /// holds (same hash, hash tag and distribution): a change of servers moves about 1/N of the
    /// keys, a change of any of these moves nearly all of them.
    pub fn same_rules(&self, other: &PlacementSpec<'_>) -> bool {
        self.hash == other.hash
            && self.hash_tag == other.hash_tag
            && self.distribution == other.distribution
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_the_placement_not_the_listen_address() {
        let a = PoolConfig::new(
            "p",
            "127.0.0.1:1",
            &["10.0.0.1:11211:1", "10.0.0.2:11211:1"],
        )
        .unwrap();
        let mut b = PoolConfig::new(
            "p",
            "127.0.0.1:2",
            &["10.0.0.1:11211:1", "10.0.0.2:11211:1"],
        )
        .unwrap();
        assert_eq!(a.placement_spec().digest(), b.placement_spec().digest());
        assert_eq!(a.placement_spec().digest().len(), 16);
        b.servers[1].weight = 2;
        assert_ne!(a.placement_spec().digest(), b.placement_spec().digest());
        let mut c = a.clone();
        c.hash_tag = Some(*b"{}");
        assert_ne!(a.placement_spec().digest(), c.placement_spec().digest());
        assert!(!a.placement_spec().same_rules(&c.placement_spec()));
        assert_eq!(
            NextMembership::of(&a).placement_spec().digest(),
            a.placement_spec().digest()
        );
    }
}
