//! How a pool places keys: [`PlacementSpec`] (the library's, shared with the client-side rings that
//! report the same digest), and how two placements' canonical texts differ, for `shardring migrate`
//! to name what a lagging participant serves.

pub use shardring::compat::twemproxy::PlacementSpec;

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
    use crate::{NextMembership, PoolConfig};
    use shardring::compat::twemproxy::Distribution;
    use shardring::hash::TwemproxyHash;

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
                    base.placement_spec().placement().unwrap(),
                    other.placement_spec().placement().unwrap(),
                );
                for i in 0..2000 {
                    let key = format!("key:{i}");
                    assert_eq!(
                        a.locate(key.as_bytes())
                            .map(|s| a.nodes()[s].name().to_owned()),
                        b.locate(key.as_bytes())
                            .map(|s| b.nodes()[s].name().to_owned()),
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
