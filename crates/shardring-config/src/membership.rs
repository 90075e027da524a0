//! What a pool's membership is, as the proxies report it (a digest, and the text it is a digest
//! of) and `shardring migrate` compares it: a ring's placement ([`PlacementSpec`]: servers, hash,
//! hash tag, distribution), or a Redis Cluster reached through its seed nodes.
//!
//! A cluster's identity is its seeds, not its masters: the masters and their slots are the
//! cluster's own business (they change with a reshard or a failover, which the proxy follows), and
//! every proxy and `migrate` read the same seeds from their files, while two proxies may read the
//! map a moment apart.

use super::PlacementSpec;

/// A pool's membership, now or next.
#[derive(Debug, Clone, Copy)]
pub enum Membership<'a> {
    /// Keys placed by a ring (ketama, modula, random) over the servers.
    Ring(PlacementSpec<'a>),
    /// Keys placed by the slot map of the Redis Cluster these seed nodes (`host:port`) belong to.
    Cluster(&'a [String]),
}

impl Membership<'_> {
    /// The canonical text the digest is taken of: a ring's [`PlacementSpec::canonical_text`]; for
    /// a cluster, a line per seed (`seed host:port`, sorted, once each), then `redis-cluster`.
    pub fn canonical_text(&self) -> String {
        match self {
            Membership::Ring(spec) => spec.canonical_text(),
            Membership::Cluster(seeds) => {
                let mut sorted: Vec<&String> = seeds.iter().collect();
                sorted.sort();
                sorted.dedup();
                let mut text = String::new();
                for s in sorted {
                    text.push_str(&format!("seed {s}\n"));
                }
                text.push_str("redis-cluster\n");
                text
            }
        }
    }

    /// The digest (16 hex digits) of [`Membership::canonical_text`]; a ring's is
    /// [`PlacementSpec::digest`].
    pub fn digest(&self) -> String {
        match self {
            Membership::Ring(spec) => spec.digest(),
            Membership::Cluster(_) => format!(
                "{:016x}",
                shardring::hash::xxh3_64(self.canonical_text().as_bytes())
            ),
        }
    }

    /// Whether keys are placed by a Redis Cluster's slot map.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Membership::Cluster(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolConfig;

    #[test]
    fn a_clusters_digest_is_its_seeds_in_any_order_and_never_a_rings() {
        let a = ["127.0.0.1:7001".to_owned(), "127.0.0.1:7000".to_owned()];
        let b = [a[1].clone(), a[0].clone(), a[0].clone()];
        let (ma, mb) = (Membership::Cluster(&a), Membership::Cluster(&b));
        assert_eq!(ma.digest(), mb.digest());
        assert_eq!(ma.digest().len(), 16);
        assert_eq!(
            ma.canonical_text(),
            "seed 127.0.0.1:7000\nseed 127.0.0.1:7001\nredis-cluster\n"
        );
        assert_ne!(ma.digest(), Membership::Cluster(&a[..1]).digest());
        let ring = PoolConfig::new(
            "p",
            "127.0.0.1:1",
            &["127.0.0.1:7000:1", "127.0.0.1:7001:1"],
        )
        .unwrap();
        assert_ne!(
            Membership::Ring(ring.placement_spec()).digest(),
            ma.digest()
        );
        assert_eq!(
            Membership::Ring(ring.placement_spec()).digest(),
            ring.placement_spec().digest()
        );
    }
}
