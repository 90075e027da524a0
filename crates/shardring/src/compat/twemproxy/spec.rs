//! A pool's placement as nutcracker reads it from one `servers:` list and its rules, and the identity
//! of that placement (its digest): what a proxy and a client-side ring of the same pool report when they
//! take part in a planned membership change, so that `shardring migrate` can tell they agree.

use super::{Distribution, TwemproxyServer};
use crate::hash::TwemproxyHash;

/// How a pool places keys: its servers and twemproxy's placement settings, borrowed from the pool.
/// A pool's key routing is built from this alone, so the configuration needs nothing from the code
/// that routes keys (which depends on it, not the other way).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacementSpec<'a> {
    /// The pool's servers, in config order.
    pub servers: &'a [TwemproxyServer],
    /// `hash`.
    pub hash: TwemproxyHash,
    /// `hash_tag`.
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution`.
    pub distribution: Distribution,
}

impl PlacementSpec<'_> {
    /// Where nutcracker sends each key with every server in (names: the server's name, else
    /// `host:port`).
    ///
    /// # Errors
    /// The library's, e.g. for `distribution: random`, which places no key reproducibly.
    pub fn placement(&self) -> Result<Box<dyn crate::Placement>, crate::Error> {
        super::placement(self.servers, self.hash, self.hash_tag, self.distribution)
    }
}

impl PlacementSpec<'_> {
    /// A digest of everything that places keys (each server's host, port, weight and name, the
    /// hash, the hash tag and the distribution): two placements with the same digest send every key
    /// to the same server, and two that send every key to the same server have the same digest. Not
    /// the listen address, which differs between proxies of one pool, and not the order the file
    /// lists the servers in: nutcracker sorts a pool's servers by identity before it places keys
    /// (ketama's ties and modula's table follow that order, see [the module docs](super)), so the
    /// digest takes them in that order too.
    /// 16 hex digits (xxh3-64 of a canonical text).
    pub fn digest(&self) -> String {
        format!(
            "{:016x}",
            crate::hash::xxh3_64(self.canonical_text().as_bytes())
        )
    }

    /// The servers in the order nutcracker places keys with: by identity, shorter first, then
    /// byte-wise (a pool cannot list one identity twice); the whole line breaks what cannot tie.
    pub fn servers_in_placement_order(&self) -> Vec<&TwemproxyServer> {
        let mut servers: Vec<(String, String, &TwemproxyServer)> = self
            .servers
            .iter()
            .map(|s| (s.identity(), s.to_string(), s))
            .collect();
        servers.sort_by(|a, b| (a.0.len(), &a.0, &a.1).cmp(&(b.0.len(), &b.0, &b.1)));
        servers.into_iter().map(|(_, _, s)| s).collect()
    }

    /// The canonical text the digest is taken of: a line per server (`host:port:weight [name]`, in
    /// [`PlacementSpec::servers_in_placement_order`]), then `hash=… hash_tag=… distribution=…`. The
    /// stats JSON shows it beside the digest, so that `shardring migrate` can say which servers or
    /// rules differ when two digests do.
    pub fn canonical_text(&self) -> String {
        let mut text = String::new();
        for s in self.servers_in_placement_order() {
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
        text
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

    /// The digest is a contract between programs (the proxy, the Rust and Python client-side rings,
    /// `shardring migrate`): pinned, so that a change to the canonical text is a decision.
    #[test]
    fn the_digest_of_a_pool_is_pinned() {
        let servers: Vec<TwemproxyServer> = ["10.0.0.2:11211:2 b", "10.0.0.1:11211:1"]
            .iter()
            .map(|l| l.parse().unwrap())
            .collect();
        let spec = PlacementSpec {
            servers: &servers,
            hash: TwemproxyHash::Fnv1a64,
            hash_tag: Some(*b"{}"),
            distribution: Distribution::Ketama,
        };
        // By identity, shorter first: the name `b` before `10.0.0.1` (port 11211 left out).
        assert_eq!(
            spec.canonical_text(),
            "10.0.0.2:11211:2 b\n10.0.0.1:11211:1\nhash=fnv1a_64 hash_tag={} distribution=ketama\n"
        );
        assert_eq!(spec.digest(), "4b1cc0cf07f7c47d");
    }
}
