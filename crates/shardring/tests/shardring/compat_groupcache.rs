//! groupcache goldens (testdata/groupcache, made by scripts/regen-golden/groupcache.py with a Go
//! program built against Debian's golang-github-golang-groupcache-dev): every key of every
//! configuration.

use test_support::golden;

use shardring::compat::{groupcache, CompatMode};

fn nodes(g: &golden::Golden) -> Vec<&str> {
    g.header["nodes"].split(' ').collect()
}

#[test]
fn groupcache_mode_matches_consistenthash() {
    let mut total = 0;
    let mut replicas_seen = Vec::new();
    for path in golden::files("groupcache") {
        let g = golden::read(&path);
        let replicas: u32 = g.header["replicas"].parse().unwrap();
        replicas_seen.push(replicas);
        let ring = groupcache::ring(&nodes(&g), replicas).unwrap();
        total += golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
    }
    for r in [1, 3, 50, 160] {
        assert!(replicas_seen.contains(&r), "no golden with {r} replicas");
    }
    assert!(total > 7000, "{total}");
}

/// What `shardring lookup --compat groupcache --vnodes N` builds.
#[test]
fn compat_mode_builds_the_same_rings() {
    for path in golden::files("groupcache") {
        let g = golden::read(&path);
        let list: Vec<(&str, f64)> = nodes(&g).into_iter().map(|n| (n, 1.0)).collect();
        let replicas: u32 = g.header["replicas"].parse().unwrap();
        let ring = CompatMode::Groupcache
            .build_with_vnodes(&list, None, Some(replicas))
            .unwrap();
        golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
    }
}

/// Two nodes share a CRC-32 point; groupcache's map gives it to the node added later, in either order,
/// and the golden keys that land there (the `tie-…` keys) show it.
#[test]
fn a_shared_point_goes_to_the_node_added_later() {
    for (file, winner) in [
        ("ties-later-wins.tsv", 2),
        ("ties-later-wins-swapped.tsv", 2),
    ] {
        let g = golden::read(&golden::testdata("groupcache").join(file));
        let tie: Vec<&str> = g.header["tie"].split(' ').collect();
        let point: u32 = tie[2].parse().unwrap();
        let order = nodes(&g);
        let ring = groupcache::ring(&order, 50).unwrap();
        assert_eq!(ring.lookup_hash(point).unwrap().name(), order[winner]);
        let on_tie = g
            .rows
            .iter()
            .filter(|(k, want)| k.starts_with(b"tie-") && want == order[winner])
            .count();
        assert!(on_tie >= 4, "{file}: {on_tie}");
    }
}

#[test]
fn weights_and_hashes_are_refused() {
    assert!(CompatMode::Groupcache
        .build(&[("a", 2.0), ("b", 1.0)], None)
        .is_err());
    assert!(CompatMode::Groupcache
        .build(&[("a", 1.0)], Some("crc32"))
        .is_err());
    assert!(groupcache::ring(&["a"], 0).is_err());
    assert_eq!(
        CompatMode::Groupcache
            .build(&[("a", 1.0), ("b", 1.0)], None)
            .unwrap()
            .point_count(),
        2 * groupcache::DEFAULT_REPLICAS as usize
    );
}

/// groupcache has no `Remove`: a new map without the node is what a service does. `Ring::remove` on
/// the built ring gives the same placement.
#[test]
fn removing_from_the_ring_equals_a_new_map_without_the_node() {
    let full = golden::read(&golden::testdata("groupcache").join("replicas50-10.tsv"));
    let less = golden::read(&golden::testdata("groupcache").join("replicas50-removed4.tsv"));
    let mut ring = groupcache::ring(&nodes(&full), 50).unwrap();
    let gone: Vec<&str> = nodes(&full)
        .into_iter()
        .filter(|n| !nodes(&less).contains(n))
        .collect();
    assert_eq!(gone.len(), 1);
    ring.remove(gone[0]).unwrap();
    golden::check(&less, |k| ring.lookup(k).unwrap().name().to_string());
}
