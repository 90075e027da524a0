//! spymemcached goldens (testdata/spymemcached, made by scripts/regen-golden/spymemcached.py with
//! Debian's libspymemcached-java 2.12.3 on OpenJDK 17): every key of every configuration.

use test_support::golden;

use shardring::compat::libmemcached::{LibmemcachedBuilder, LibmemcachedMode};
use shardring::compat::spymemcached::{KeyFormat, SpymemcachedBuilder};
use shardring::compat::CompatMode;
use shardring::hash::JavaHash;
use shardring::Ring;

/// The golden's nodes as Java printed them, with their weights (1 without a weights map), in list
/// order; the removed node dropped.
fn nodes(g: &golden::Golden) -> Vec<(String, u32)> {
    g.header["nodes"]
        .split(' ')
        .map(|nw| match nw.rsplit_once('=') {
            Some((n, w)) if g.header["weighted"] == "true" => (n.to_string(), w.parse().unwrap()),
            _ => (nw.to_string(), 1),
        })
        .filter(|(n, _)| *n != g.header["removed"])
        .collect()
}

fn format(g: &golden::Golden) -> KeyFormat {
    match g.header["format"].as_str() {
        "SPYMEMCACHED" => KeyFormat::Spymemcached,
        "LIBMEMCACHED" => KeyFormat::Libmemcached,
        other => panic!("{other}"),
    }
}

fn ring_of(g: &golden::Golden) -> Ring {
    let hash: JavaHash = g.header["hash"].parse().unwrap();
    nodes(g)
        .into_iter()
        .fold(
            SpymemcachedBuilder::new()
                .hash(hash)
                .weighted(g.header["weighted"] == "true")
                .key_format(format(g))
                .repetitions(g.header["repetitions"].parse().unwrap()),
            |b, (n, w)| b.node(n, w),
        )
        .build()
        .unwrap()
}

#[test]
fn spymemcached_mode_matches_the_real_ketama_node_locator() {
    let mut total = 0;
    let files = golden::files("spymemcached");
    assert!(files.len() >= 15, "{}", files.len());
    for path in files {
        let g = golden::read(&path);
        let ring = ring_of(&g);
        total += golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
    }
    assert!(total > 14_000, "{total}");
}

/// The same through `CompatMode`, what `shardring lookup --compat spymemcached[-weighted]` builds.
#[test]
fn compat_modes_build_the_same_rings() {
    for path in golden::files("spymemcached") {
        let g = golden::read(&path);
        if format(&g) != KeyFormat::Spymemcached {
            // The CLI modes use the default key format.
            continue;
        }
        let list = nodes(&g);
        let refs: Vec<(&str, f64)> = list
            .iter()
            .map(|(n, w)| (n.as_str(), f64::from(*w)))
            .collect();
        let mode = if g.header["weighted"] == "true" {
            CompatMode::SpymemcachedWeighted
        } else {
            CompatMode::Spymemcached
        };
        let reps: u32 = g.header["repetitions"].parse().unwrap();
        let ring = mode
            .build_with_vnodes(&refs, Some(&g.header["hash"]), Some(reps))
            .unwrap();
        golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
    }
}

/// CRC_HASH's 15-bit points collide; keys that land on a shared point go to the node listed last.
#[test]
fn ties_go_to_the_node_listed_last() {
    let g = golden::read(&golden::testdata("spymemcached").join("crc-ties.tsv"));
    let ring = ring_of(&g);
    let points: Vec<(u32, &str)> = ring.points().map(|(p, n)| (p, n.name())).collect();
    let tied: Vec<u32> = points
        .windows(2)
        .filter(|w| w[0].0 == w[1].0 && w[0].1 != w[1].1)
        .map(|w| w[0].0)
        .collect();
    assert!(tied.len() > 10, "{}", tied.len());
    // How many golden keys land on a shared point: the check above proves them all.
    let on_ties = g
        .rows
        .iter()
        .filter(|(k, _)| {
            let p = ring.key_position(k);
            let owner = points.partition_point(|&(q, _)| q < p) % points.len();
            tied.contains(&points[owner].0)
        })
        .count();
    assert!(on_ties > 10, "{on_ties}");
}

/// libmemcached's SPY modes are not spymemcached: count the golden keys they place elsewhere
/// (printed with `--nocapture`).
#[test]
fn libmemcached_spy_modes_differ_from_real_spymemcached() {
    for (file, weighted) in [("equal10.tsv", false), ("weighted.tsv", true)] {
        let g = golden::read(&golden::testdata("spymemcached").join(file));
        let mode = if weighted {
            LibmemcachedMode::SpyWeighted
        } else {
            LibmemcachedMode::Spy
        };
        let b = nodes(&g)
            .into_iter()
            .fold(LibmemcachedBuilder::new(mode), |b, (n, w)| {
                let (host, port) = n.trim_start_matches('/').rsplit_once(':').unwrap();
                b.server(host, port.parse().unwrap(), w)
            });
        let lm = b.build().unwrap();
        let differ = g
            .rows
            .iter()
            .filter(|(k, want)| lm.lookup(k).unwrap().name() != want.trim_start_matches('/'))
            .count();
        println!(
            "{file}: libmemcached {} places {differ} of {} keys elsewhere",
            mode.name(),
            g.rows.len()
        );
        assert!(
            differ * 2 > g.rows.len() / 2,
            "{file}: only {differ} differ"
        );
    }
}

/// A weights map of 25 equal weights gives each node 156 points (single precision), no map 160.
#[test]
fn a_map_of_equal_weights_is_not_the_same_as_no_map() {
    let g = golden::read(&golden::testdata("spymemcached").join("weighted-equal25.tsv"));
    let names: Vec<String> = nodes(&g).into_iter().map(|(n, _)| n).collect();
    let build = |weighted| {
        names
            .iter()
            .fold(SpymemcachedBuilder::new().weighted(weighted), |b, n| {
                b.node(n.clone(), 1)
            })
            .build()
            .unwrap()
    };
    assert_eq!(build(true).point_count(), 25 * 156);
    assert_eq!(build(false).point_count(), 25 * 160);
    let ring = build(true);
    golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
}

proptest::proptest! {
    /// Hostile nodes, weights, hash names and point counts give the new modes (spymemcached,
    /// spymemcached-weighted, groupcache) an error or a ring that finds every key, never a panic.
    #[test]
    fn java_and_go_modes_never_panic(
        mode in proptest::sample::select(vec![CompatMode::Spymemcached,
                                              CompatMode::SpymemcachedWeighted,
                                              CompatMode::Groupcache]),
        nodes in proptest::collection::vec(("[a-z0-9./:<>\\[\\]]{0,14}", -1.0f64..6.0), 0..6),
        hash in proptest::option::of("KETAMA_HASH|NATIVE_HASH|crc|fnv1a_32|[a-z_:]{0,8}"),
        vnodes in proptest::option::of(proptest::prop_oneof![0u32..10, proptest::strategy::Just(u32::MAX), 1u32..100_000]),
        key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
    ) {
        let list: Vec<(&str, f64)> = nodes.iter().map(|(n, w)| (n.as_str(), w.round())).collect();
        if let Ok(ring) = mode.build_with_vnodes(&list, hash.as_deref(), vnodes) {
            proptest::prop_assert_eq!(ring.lookup(&key).is_some(), !list.is_empty());
            let _ = ring.replicas(&key).count();
        }
    }
}

/// With the LIBMEMCACHED key format and a weights map, spymemcached builds libmemcached's
/// `KETAMA_WEIGHTED` continuum: the same points, so the same servers for every key that is valid
/// UTF-8 (Java reads the others with U+FFFD in place of the bad bytes; libmemcached hashes the bytes).
#[test]
fn libmemcached_key_format_with_weights_is_libmemcached_weighted() {
    let mut g =
        golden::read(&golden::testdata("spymemcached").join("libmemcached-format-weighted.tsv"));
    g.rows.retain(|(k, _)| std::str::from_utf8(k).is_ok());
    assert!(g.rows.len() > 700, "{}", g.rows.len());
    let b = nodes(&g).into_iter().fold(
        LibmemcachedBuilder::new(LibmemcachedMode::KetamaWeighted),
        |b, (n, w)| {
            let (host, port) = n.rsplit_once(':').unwrap();
            let host = host.split_once('/').unwrap().0;
            b.server(host, port.parse().unwrap(), w)
        },
    );
    let lm = b.build().unwrap();
    let names: Vec<(String, String)> = nodes(&g)
        .into_iter()
        .map(|(n, _)| {
            let (host, port) = n.rsplit_once(':').unwrap();
            (format!("{}:{port}", host.split_once('/').unwrap().0), n)
        })
        .collect();
    golden::check(&g, |k| {
        let got = lm.lookup(k).unwrap().name();
        names.iter().find(|(h, _)| h == got).unwrap().1.clone()
    });
}

/// `Ring::remove` on the built ring gives what spymemcached's `updateLocator` gives without the node.
#[test]
fn removing_from_the_ring_equals_update_locator() {
    for file in ["equal10-removed4.tsv", "weighted6-removed2.tsv"] {
        let g = golden::read(&golden::testdata("spymemcached").join(file));
        let removed = g.header["removed"].clone();
        let mut full = golden::read(&g.path);
        full.header.insert("removed".into(), String::new());
        let mut ring = ring_of(&full);
        ring.remove(&removed).unwrap();
        golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
    }
}
