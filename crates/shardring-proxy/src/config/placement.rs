//! How a pool places keys ([`PlacementSpec`]: its servers and twemproxy's placement settings), and
//! the identity of a placement: its digest, which proxies report for their current and next
//! membership and `shardring migrate` compares, and the canonical text the digest is taken of.

use shardring::compat::twemproxy::{Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;

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
    pub fn placement(&self) -> Result<Box<dyn shardring::Placement>, shardring::Error> {
        shardring::compat::twemproxy::placement(
            self.servers,
            self.hash,
            self.hash_tag,
            self.distribution,
        )
    }
}

impl PlacementSpec<'_> {
    /// A digest of everything that places keys (each server's host, port, weight and name, the
    /// hash, the hash tag and the distribution): two placements with the same digest send every key
    /// to the same server, and two that send every key to the same server have the same digest. Not
    /// the listen address, which differs between proxies of one pool, and not the order the file
    /// lists the servers in: nutcracker sorts a pool's servers by identity before it places keys
    /// (ketama's ties and modula's table follow that order, see
    /// [`shardring::compat::twemproxy`]), so the digest takes them in that order too.
    /// 16 hex digits (xxh3-64 of a canonical text).
    pub fn digest(&self) -> String {
        format!(
            "{:016x}",
            shardring::hash::xxh3_64(self.canonical_text().as_bytes())
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
    /// rules differ when two digests do ([`placement_differences`]).
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

/// How the placement of canonical text `served` differs from `wanted`'s
/// ([`PlacementSpec::canonical_text`]): `+LINE` for each server line or rule line only `served` has,
/// `-LINE` for each only `wanted` has; empty when they place keys alike.
pub fn placement_differences(wanted: &str, served: &str) -> Vec<String> {
    let (w, s): (Vec<&str>, Vec<&str>) = (wanted.lines().collect(), served.lines().collect());
    let mut out: Vec<String> = s
        .iter()
        .filter(|l| !w.contains(l))
        .map(|l| format!("+{l}"))
        .collect();
    out.extend(w.iter().filter(|l| !s.contains(l)).map(|l| format!("-{l}")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NextMembership, PoolConfig};

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

    #[test]
    fn the_digest_does_not_follow_the_files_order_but_each_server_and_rule() {
        let lines = [
            "10.0.0.1:11211:1",
            "10.0.0.2:11211:2 b",
            "10.0.0.3:11212:1",
            "/tmp/mc.sock:1 s",
        ];
        let base = PoolConfig::new("p", "127.0.0.1:1", &lines).unwrap();
        let digest = base.placement_spec().digest();
        for distribution in [Distribution::Ketama, Distribution::Modula] {
            let base = PoolConfig {
                distribution,
                ..base.clone()
            };
            let want = base.placement_spec().digest();
            // Every order of the lines: the same digest, and the same server for every key.
            for perm in permutations(&lines) {
                let other = PoolConfig {
                    distribution,
                    ..PoolConfig::new("p", "127.0.0.1:2", &perm).unwrap()
                };
                assert_eq!(other.placement_spec().digest(), want, "{perm:?}");
                assert!(placement_differences(
                    &base.placement_spec().canonical_text(),
                    &other.placement_spec().canonical_text()
                )
                .is_empty());
                let (a, b) = (
                    crate::router::build_placement(base.placement_spec(), &[true; 4]).unwrap(),
                    crate::router::build_placement(other.placement_spec(), &[true; 4]).unwrap(),
                );
                for i in 0..2000 {
                    let key = format!("key:{i}");
                    assert_eq!(
                        a.server_for(key.as_bytes())
                            .map(|s| base.servers[s].to_string()),
                        b.server_for(key.as_bytes())
                            .map(|s| other.servers[s].to_string()),
                        "{distribution} {perm:?} {key}"
                    );
                }
            }
        }
        // Each server's address, weight and name, and the rules, still count, and are named.
        let mut moved = base.clone();
        moved.servers[2].port = 11213;
        assert_ne!(moved.placement_spec().digest(), digest);
        let differences = |a: &PoolConfig, b: &PoolConfig| {
            placement_differences(
                &a.placement_spec().canonical_text(),
                &b.placement_spec().canonical_text(),
            )
        };
        assert_eq!(
            differences(&base, &moved),
            ["+10.0.0.3:11213:1", "-10.0.0.3:11212:1"]
        );
        let mut renamed = base.clone();
        renamed.servers[1].name = Some("c".into());
        assert_ne!(renamed.placement_spec().digest(), digest);
        let mut heavier = base.clone();
        heavier.servers[0].weight = 3;
        assert_ne!(heavier.placement_spec().digest(), digest);
        let mut hashed = base.clone();
        hashed.hash = TwemproxyHash::Md5;
        assert_ne!(hashed.placement_spec().digest(), digest);
        assert_eq!(
            differences(&base, &hashed),
            [
                "+hash=md5 hash_tag= distribution=ketama",
                "-hash=fnv1a_64 hash_tag= distribution=ketama"
            ]
        );
    }

    /// Every order of `items` (Heap's algorithm).
    fn permutations<'a>(items: &[&'a str]) -> Vec<Vec<&'a str>> {
        let mut out = Vec::new();
        let mut v = items.to_vec();
        let mut c = vec![0; v.len()];
        out.push(v.clone());
        let mut i = 0;
        while i < v.len() {
            if c[i] < i {
                v.swap(if i % 2 == 0 { 0 } else { c[i] }, i);
                out.push(v.clone());
                c[i] += 1;
                i = 0;
            } else {
                c[i] = 0;
                i += 1;
            }
        }
        out
    }
}
