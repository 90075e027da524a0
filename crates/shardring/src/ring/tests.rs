//! The ring against a naive oracle, and its contract's edge cases.

use std::cell::Cell;

use proptest::prelude::*;

use super::*;
use crate::compat::CompatMode;

thread_local! {
    /// Builds on this thread use this many threads, whatever their size (`None`: as configured).
    pub(super) static FORCE_BUILD_THREADS: Cell<Option<usize>> = const { Cell::new(None) };
}

/// `build` run with every build on `threads` threads.
fn on_threads<T>(threads: usize, build: impl FnOnce() -> T) -> T {
    FORCE_BUILD_THREADS.set(Some(threads));
    let built = build();
    FORCE_BUILD_THREADS.set(None);
    built
}
use crate::analysis::{self, KeySet};
use crate::hash::KeyHash;

/// The oracle: the owner of the first point at or after `hash` by a linear scan over the points in
/// (position, name) order, wrapping.
fn naive_owner(ring: &Ring, hash: u32) -> Option<String> {
    let mut points: Vec<(u32, &str)> = ring.points().map(|(p, n)| (p, n.name())).collect();
    points.sort();
    points
        .iter()
        .find(|(p, _)| *p >= hash)
        .or(points.first())
        .map(|(_, n)| n.to_string())
}

fn ring_of(names: &[String], vnodes: u32) -> Ring {
    Ring::builder()
        .vnodes(vnodes)
        .nodes(names.iter().cloned())
        .build()
        .unwrap()
}

fn names_strategy() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::btree_set("[a-z0-9:.]{1,12}", 1..12)
        .prop_map(|set| set.into_iter().collect::<Vec<_>>())
}

proptest! {
    #[test]
    fn lookup_equals_linear_scan(names in names_strategy(), vnodes in 1u32..40,
                                 hashes in proptest::collection::vec(any::<u32>(), 1..64),
                                 index in any::<bool>(), table in any::<bool>()) {
        let ring = Ring::builder().vnodes(vnodes).lookup_index(index).line_table(table)
            .nodes(names.iter().cloned()).build().unwrap();
        for h in hashes.into_iter().chain([0, u32::MAX]) {
            prop_assert_eq!(ring.lookup_hash(h).map(|n| n.name().to_string()), naive_owner(&ring, h));
        }
    }

    #[test]
    fn adding_a_node_moves_keys_only_to_it(names in names_strategy(), keys in proptest::collection::vec(any::<Vec<u8>>(), 1..200)) {
        let (first, rest) = names.split_first().unwrap();
        let before = ring_of(rest, 20);
        let mut after = before.clone();
        after.add(first.clone(), 1.0).unwrap();
        for key in &keys {
            let new = after.lookup(key).unwrap().name();
            if let Some(old) = before.lookup(key) {
                prop_assert!(new == old.name() || new == first.as_str());
            }
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_keys(names in names_strategy(), pick in any::<prop::sample::Index>(),
                                           keys in proptest::collection::vec(any::<Vec<u8>>(), 1..200)) {
        let before = ring_of(&names, 20);
        let gone = pick.get(&names).clone();
        let mut after = before.clone();
        after.remove(&gone).unwrap();
        for key in &keys {
            let old = before.lookup(key).unwrap().name();
            if old != gone {
                prop_assert_eq!(after.lookup(key).map(|n| n.name()), Some(old));
            }
        }
    }

    #[test]
    fn placement_ignores_insertion_order(names in names_strategy(), seed in any::<u64>(),
                                         keys in proptest::collection::vec(any::<Vec<u8>>(), 1..100)) {
        let mut shuffled = names.clone();
        // A deterministic shuffle from the seed.
        let mut s = seed | 1;
        for i in (1..shuffled.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            shuffled.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let a = ring_of(&names, 10);
        let mut b = Ring::builder().vnodes(10).build().unwrap();
        for n in &shuffled { b.add(n.clone(), 1.0).unwrap(); }
        let pa: Vec<(u32, &str)> = a.points().map(|(p, n)| (p, n.name())).collect();
        let pb: Vec<(u32, &str)> = b.points().map(|(p, n)| (p, n.name())).collect();
        prop_assert_eq!(pa, pb);
        for key in &keys {
            prop_assert_eq!(a.lookup(key).unwrap().name(), b.lookup(key).unwrap().name());
        }
    }

    #[test]
    fn replicas_are_distinct_and_start_with_the_lookup(names in names_strategy(), key in any::<Vec<u8>>()) {
        let ring = ring_of(&names, 8);
        let replicas: Vec<&str> = ring.replicas(&key).map(|n| n.name()).collect();
        prop_assert_eq!(replicas.len(), names.len());
        prop_assert_eq!(replicas[0], ring.lookup(&key).unwrap().name());
        let mut sorted = replicas.clone();
        sorted.sort();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), replicas.len());
        let mut out = Vec::new();
        crate::Placement::replicas_into(&ring, &key, 3, &mut out);
        prop_assert_eq!(out.len(), names.len().min(3));
        for (i, r) in out.iter().zip(&replicas) {
            prop_assert_eq!(ring.nodes()[*i].name(), *r);
        }
    }

    #[test]
    fn raising_a_weight_moves_keys_only_to_that_node(names in names_strategy(), keys in proptest::collection::vec(any::<Vec<u8>>(), 1..200)) {
        let before = ring_of(&names, 10);
        let mut after = before.clone();
        after.set_weight(&names[0], 3.0).unwrap();
        for key in &keys {
            let (old, new) = (before.lookup(key).unwrap().name(), after.lookup(key).unwrap().name());
            prop_assert!(old == new || new == names[0]);
        }
    }
}

#[test]
fn empty_ring_answers_none() {
    let ring = Ring::new();
    assert!(ring.is_empty());
    assert_eq!(ring.lookup("k"), None);
    assert_eq!(ring.lookup_hash(0), None);
    assert_eq!(ring.replicas("k").count(), 0);
    assert!(ring.shares().is_empty());
    assert!(ring.migration_to(&Ring::new()).is_empty());
}

#[test]
fn bad_input_is_an_error_and_leaves_the_ring_unchanged() {
    let mut ring = Ring::builder().nodes(["a", "b"]).build().unwrap();
    let points = ring.point_count();
    assert!(matches!(
        ring.add("a", 1.0),
        Err(Error::DuplicateNode { .. })
    ));
    assert!(matches!(
        ring.add("c", 0.0),
        Err(Error::InvalidWeight { .. })
    ));
    assert!(matches!(
        ring.add("c", -2.0),
        Err(Error::InvalidWeight { .. })
    ));
    assert!(matches!(ring.add("", 1.0), Err(Error::EmptyName)));
    assert!(matches!(ring.remove("zz"), Err(Error::UnknownNode { .. })));
    assert!(matches!(
        ring.set_weight("a", f64::NAN),
        Err(Error::InvalidWeight { .. })
    ));
    assert_eq!(ring.point_count(), points);
    assert!(matches!(
        Ring::builder().nodes(["x", "x"]).build(),
        Err(Error::DuplicateNode { .. })
    ));
    assert!(matches!(
        Ring::builder().vnodes(0).build(),
        Err(Error::InvalidSetting { .. })
    ));
    // Of several bad members, the first is reported.
    assert!(matches!(
        Ring::builder().nodes(["x", "y", "x"]).node("z", 0.0).build(),
        Err(Error::DuplicateNode { node }) if node == "x"
    ));
    assert!(matches!(
        Ring::builder()
            .node("z", 0.0)
            .nodes(["x", "y", "x"])
            .build(),
        Err(Error::InvalidWeight { .. })
    ));
    assert!(matches!(
        Ring::builder().nodes(["x", "y", "y", "x"]).build(),
        Err(Error::DuplicateNode { node }) if node == "y"
    ));
}

#[test]
fn too_many_points_is_an_error_not_an_allocation() {
    let mut ring = Ring::builder()
        .max_points(1000)
        .node("a", 1.0)
        .build()
        .unwrap();
    let err = ring.add("huge", 1e12).unwrap_err();
    assert!(
        matches!(err, Error::TooManyPoints { limit: 1000, .. }),
        "{err}"
    );
    assert!(matches!(
        ring.set_weight("a", 100.0),
        Err(Error::TooManyPoints { .. })
    ));
    assert_eq!(ring.point_count(), 160);
    assert!(Ring::builder().node("a", f64::MAX).build().is_err());
}

#[test]
fn tiny_weights_still_get_a_point() {
    let ring = Ring::builder()
        .node("a", 1e-9)
        .node("b", 1.0)
        .build()
        .unwrap();
    assert_eq!(ring.node_points("a").count(), 1);
    assert_eq!(ring.node_points("b").count(), 160);
}

#[test]
fn colliding_points_go_to_the_smaller_name_whatever_the_order() {
    // Real collisions are too rare to find on demand, so place the colliding points by hand, once
    // through the full sort (`point_order`) and once through the incremental merge.
    let mut a = Ring::builder().vnodes(1).build().unwrap();
    a.add("b", 1.0).unwrap();
    a.add("a", 1.0).unwrap();
    a.points = vec![
        Point {
            position: 7,
            node: 0,
        },
        Point {
            position: 7,
            node: 1,
        },
    ];
    let nodes = a.nodes.clone();
    a.points
        .sort_by(|x, y| Ring::point_order(a.scheme, &nodes, x, y));
    a.reindex();
    assert_eq!(a.lookup_hash(3).unwrap().name(), "a");
    assert_eq!(a.lookup_hash(8).unwrap().name(), "a");
    let mut merged = Ring::builder().vnodes(1).build().unwrap();
    merged.nodes = vec![Node::new("b").unwrap(), Node::new("a").unwrap()];
    merged.points = vec![Point {
        position: 7,
        node: 0,
    }];
    merged.merge_points(1, vec![7]);
    merged.reindex();
    assert_eq!(merged.lookup_hash(7).unwrap().name(), "a");
}

#[test]
fn shares_sum_to_one_and_follow_weight() {
    let ring = Ring::builder()
        .node("a", 1.0)
        .node("b", 1.0)
        .node("c", 2.0)
        .build()
        .unwrap();
    let shares = ring.shares();
    let total: f64 = shares.iter().map(|s| s.1).sum();
    assert!((total - 1.0).abs() < 1e-9);
    let c = shares.iter().find(|s| s.0.name() == "c").unwrap().1;
    assert!((c - 0.5).abs() < 0.08, "{shares:?}");
    let single = Ring::builder().vnodes(1).node("only", 1.0).build().unwrap();
    assert_eq!(single.shares()[0].1, 1.0);
}

#[test]
fn node_points_follow_the_documented_scheme() {
    let ring = Ring::builder()
        .vnodes(3)
        .node("cache-1", 1.0)
        .build()
        .unwrap();
    let mut expected: Vec<u32> = (0..3)
        .map(|i| HashFunction::Xxh3.hash32(format!("cache-1-{i}").as_bytes()))
        .collect();
    expected.sort();
    assert_eq!(ring.node_points("cache-1").collect::<Vec<_>>(), expected);
}

#[test]
fn migration_plan_covers_exactly_the_moved_hashes() {
    let before = Ring::builder()
        .vnodes(4)
        .nodes(["a", "b", "c"])
        .build()
        .unwrap();
    let mut after = before.clone();
    after.add("d", 1.0).unwrap();
    after.remove("b").unwrap();
    let plan = before.migration_to(&after);
    assert!(!plan.is_empty());
    // Ranges are ordered, disjoint, and inside the circle.
    for w in plan.windows(2) {
        assert!(w[0].last < w[1].first);
    }
    // Sample hashes everywhere: a hash is in the plan exactly when its owner changes, with those owners.
    let mut h = 0u32;
    for _ in 0..20_000 {
        h = h.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let old = before.lookup_hash(h).map(|n| n.name().to_string());
        let new = after.lookup_hash(h).map(|n| n.name().to_string());
        let range = plan.iter().find(|m| m.first <= h && h <= m.last);
        match range {
            Some(m) => {
                assert_eq!((&m.from, &m.to), (&old, &new));
                assert_ne!(old, new);
            }
            None => assert_eq!(old, new),
        }
    }
    for boundary in [0, u32::MAX] {
        let moved = before.lookup_hash(boundary).map(|n| n.name().to_string())
            != after.lookup_hash(boundary).map(|n| n.name().to_string());
        assert_eq!(
            moved,
            plan.iter()
                .any(|m| m.first <= boundary && boundary <= m.last)
        );
    }
}

#[test]
fn acceptance_spread_and_movement_at_ten_nodes() {
    // The ring's original acceptance figures: 10 nodes × 160 points, 1M keys.
    let names: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
    let keys = KeySet::synthetic(1_000_000);
    let ring = ring_of(&names, 160);
    let spread = analysis::spread(&ring, &keys);
    assert!(spread.peak_to_mean <= 1.2, "{spread:?}");

    let mut grown = ring.clone();
    grown.add("node-10", 1.0).unwrap();
    let add = analysis::movement(&ring, &grown, &keys);
    let ideal = 1.0 / 11.0;
    assert!(
        add.fraction() >= 0.8 * ideal && add.fraction() <= 1.25 * ideal,
        "{add:?}"
    );
    assert_eq!(add.moved_to.keys().collect::<Vec<_>>(), vec!["node-10"]);

    let mut shrunk = ring.clone();
    shrunk.remove("node-4").unwrap();
    let remove = analysis::movement(&ring, &shrunk, &keys);
    assert_eq!(remove.moved_from.keys().collect::<Vec<_>>(), vec!["node-4"]);
    let owned = spread.counts.iter().find(|c| c.0 == "node-4").unwrap().1;
    assert_eq!(remove.moved, owned);
}

proptest! {
    /// The in-place merge and the incremental index update give exactly the ring a full
    /// build gives, with few vnodes (so positions collide) and across index sizes.
    #[test]
    fn adding_nodes_one_by_one_equals_a_full_build(names in names_strategy(), vnodes in 1u32..40,
                                                   index in any::<bool>(), colliding in any::<bool>()) {
        let hash = if colliding { HashFunction::Crc32 } else { HashFunction::Xxh3 };
        let full = Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index)
            .nodes(names.iter().cloned()).build().unwrap();
        let mut grown = Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index).build().unwrap();
        for name in names.iter().rev() {
            grown.add(name.clone(), 1.0).unwrap();
        }
        let points = |r: &Ring| r.points().map(|(p, n)| (p, n.name().to_string())).collect::<Vec<_>>();
        prop_assert_eq!(points(&grown), points(&full));
        prop_assert_eq!(&grown.index.starts_for_tests(), &full.index.starts_for_tests());
    }
}

proptest! {
    /// Removing a node (and updating the index in place) gives exactly the ring a full build of the
    /// others gives.
    #[test]
    fn removing_a_node_equals_a_full_build(names in names_strategy(), vnodes in 1u32..40,
                                           pick in any::<prop::sample::Index>(),
                                           index in any::<bool>(), colliding in any::<bool>()) {
        let hash = if colliding { HashFunction::Crc32 } else { HashFunction::Xxh3 };
        let build = |names: &[String]| Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index)
            .nodes(names.iter().cloned()).build().unwrap();
        let gone = pick.get(&names).clone();
        let mut shrunk = build(&names);
        shrunk.remove(&gone).unwrap();
        let rest: Vec<String> = names.iter().filter(|n| **n != gone).cloned().collect();
        prop_assert_eq!(layout(&shrunk), layout(&build(&rest)));
    }
}

proptest! {
    /// Re-weighting a node in place (the index updated or rebuilt) gives exactly the ring a full
    /// build with the new weight gives.
    #[test]
    fn reweighting_a_node_equals_a_full_build(names in names_strategy(), vnodes in 1u32..40,
                                              pick in any::<prop::sample::Index>(), weight in 1u32..8,
                                              index in any::<bool>(), colliding in any::<bool>()) {
        let hash = if colliding { HashFunction::Crc32 } else { HashFunction::Xxh3 };
        let build = |weight_of: &dyn Fn(&str) -> f64| {
            let mut builder = Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index);
            for name in &names {
                builder = builder.node(name.clone(), weight_of(name));
            }
            builder.build().unwrap()
        };
        let changed = pick.get(&names).clone();
        let weight = f64::from(weight) / 4.0;
        let mut reweighted = build(&|_| 1.0);
        reweighted.set_weight(&changed, weight).unwrap();
        let full = build(&|name| if name == changed { weight } else { 1.0 });
        prop_assert_eq!(layout(&reweighted), layout(&full));
    }
}

#[test]
fn adding_to_a_large_ring_equals_a_full_build() {
    let names: Vec<String> = (0..300)
        .map(|i| format!("10.0.{}.{}:11211", i / 256, i % 256))
        .collect();
    for index in [true, false] {
        let full = Ring::builder()
            .lookup_index(index)
            .nodes(names.iter().cloned())
            .build()
            .unwrap();
        let mut grown = Ring::builder()
            .lookup_index(index)
            .nodes(names[1..].iter().cloned())
            .build()
            .unwrap();
        grown.add(names[0].clone(), 1.0).unwrap();
        // Node indices differ (the added node is last), names must not.
        assert!(grown
            .points()
            .map(|(p, n)| (p, n.name()))
            .eq(full.points().map(|(p, n)| (p, n.name()))));
        assert_eq!(
            grown.index.starts_for_tests(),
            full.index.starts_for_tests()
        );
        // And back: removing the node updates the index in place.
        let mut shrunk = full.clone();
        shrunk.remove(&names[0]).unwrap();
        let rest = Ring::builder()
            .lookup_index(index)
            .nodes(names[1..].iter().cloned())
            .build()
            .unwrap();
        assert_eq!(layout(&shrunk), layout(&rest));
        // And re-weighting one in place.
        shrunk.set_weight(&names[1], 1.5).unwrap();
        let mut builder = Ring::builder()
            .lookup_index(index)
            .node(names[1].clone(), 1.5);
        for name in &names[2..] {
            builder = builder.node(name.clone(), 1.0);
        }
        assert_eq!(layout(&shrunk), layout(&builder.build().unwrap()));
    }
}

#[test]
fn real_collisions_are_ordered_by_name_on_every_path() {
    // 1000 nodes × 160 points is 160,000 points on a 2^32 circle: about three colliding pairs are
    // expected (birthday bound), and with these names there are some.
    let names: Vec<String> = (0..1000)
        .map(|i| format!("10.1.{}.{}:11211", i / 256, i % 256))
        .collect();
    let forward = ring_of(&names, 160);
    let collisions: Vec<(u32, &str, &str)> = forward
        .points()
        .zip(forward.points().skip(1))
        .filter(|((p, _), (q, _))| p == q)
        .map(|((p, a), (_, b))| (p, a.name(), b.name()))
        .filter(|(_, a, b)| a != b)
        .collect();
    assert!(!collisions.is_empty(), "no collision to test with");
    for &(_, a, b) in &collisions {
        assert!(a < b, "tie not broken by name: {a} before {b}");
    }

    let reversed: Vec<String> = names.iter().rev().cloned().collect();
    let backward = ring_of(&reversed, 160);
    let mut incremental = {
        let (_, x, y) = collisions[0];
        let rest: Vec<String> = names
            .iter()
            .filter(|n| *n != x && *n != y)
            .cloned()
            .collect();
        let mut ring = ring_of(&rest, 160);
        ring.add(y, 1.0).unwrap();
        ring.add(x, 1.0).unwrap();
        ring
    };
    let points = |r: &Ring| {
        r.points()
            .map(|(p, n)| (p, n.name().to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(points(&forward), points(&backward));
    assert_eq!(points(&forward), points(&incremental));
    let (position, winner, _) = collisions[0];
    assert_eq!(incremental.lookup_hash(position).unwrap().name(), winner);
    incremental.remove(winner).unwrap();
    assert_ne!(incremental.lookup_hash(position).unwrap().name(), winner);
}

#[test]
fn adding_nodes_keeps_memory_near_eight_bytes_a_point() {
    let names: Vec<String> = (0..200).map(|i| format!("node-{i}")).collect();
    let mut ring = ring_of(&names[..100], 160);
    for name in &names[100..] {
        ring.add(name.clone(), 1.0).unwrap();
    }
    let per_point = ring.memory_bytes() as f64 / ring.point_count() as f64;
    assert!(per_point <= 16.0, "{per_point} bytes a point");
}

/// A ring's points by name, and its index, for comparing rings built apart.
fn layout(ring: &Ring) -> (Vec<(u32, String)>, Vec<u32>) {
    let points = ring.points().map(|(p, n)| (p, n.name().to_string()));
    (points.collect(), ring.index.starts_for_tests())
}

proptest! {
    /// A build on several threads gives the ring a build on one gives, point for point, with weights,
    /// colliding positions (CRC32 and few vnodes) and every compatibility scheme.
    #[test]
    fn threaded_builds_equal_serial_builds(names in names_strategy(), vnodes in 1u32..40,
                                           weights in proptest::collection::vec(1u32..4, 12),
                                           colliding in any::<bool>(), index in any::<bool>(),
                                           threads in 2usize..6) {
        let hash = if colliding { HashFunction::Crc32 } else { HashFunction::Xxh3 };
        let build = || {
            let mut builder = Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index);
            for (name, &w) in names.iter().zip(&weights) {
                builder = builder.node(name.clone(), f64::from(w) / 2.0);
            }
            builder.build().unwrap()
        };
        let serial = on_threads(1, build);
        let threaded = on_threads(threads, build);
        prop_assert_eq!(layout(&threaded), layout(&serial));
        prop_assert_eq!(threaded.has_lookup_index(), index);

        let servers: Vec<(String, f64)> = names.iter().zip(&weights)
            .map(|(n, &w)| (format!("{n}:11211"), f64::from(w))).collect();
        let servers: Vec<(&str, f64)> = servers.iter().map(|(n, w)| (n.as_str(), *w)).collect();
        for &mode in CompatMode::ALL {
            // groupcache has no weights, so it refuses servers of weight 2 and 3.
            let Ok(serial) = on_threads(1, || mode.build(&servers, None)) else {
                prop_assert_eq!(mode, CompatMode::Groupcache);
                continue;
            };
            let threaded = on_threads(threads, || mode.build(&servers, None).unwrap());
            prop_assert_eq!(layout(&threaded), layout(&serial), "{}", mode.name());
        }
    }
}

#[test]
fn large_builds_on_threads_equal_serial_builds() {
    // 500 nodes × 160 points: past the size where builds start threads.
    let names: Vec<String> = (0..500)
        .map(|i| format!("10.1.{}.{}:11211", i / 256, i % 256))
        .collect();
    for index in [true, false] {
        let build = |threads: usize| {
            let mut builder = Ring::builder().build_threads(threads).lookup_index(index);
            for (i, name) in names.iter().enumerate() {
                builder = builder.node(name.clone(), 0.5 + (i % 3) as f64 * 0.5);
            }
            builder.build().unwrap()
        };
        let serial = build(1);
        assert!(serial.point_count() as u64 >= PARALLEL_MIN_POINTS);
        for threads in [2, 3, 8] {
            assert_eq!(
                layout(&build(threads)),
                layout(&serial),
                "{threads} threads"
            );
        }
    }
    assert!(matches!(
        Ring::builder().build_threads(0).build(),
        Err(Error::InvalidSetting {
            setting: "build_threads",
            ..
        })
    ));
}

/// The ring's line table, and one built afresh from its points and index as they are now (`None`
/// when the ring keeps no table), and the ring's index against one built afresh.
fn tables(ring: &Ring) -> (Option<super::LineTable>, Option<super::LineTable>) {
    let index = super::TopBitsIndex::build(&ring.points, super::index::bits_for(ring.points.len()));
    assert_eq!(ring.index.starts_for_tests(), index.starts_for_tests());
    let fresh = ring
        .lines
        .as_ref()
        .map(|_| super::LineTable::build(&ring.points, &index));
    (ring.lines.clone(), fresh)
}

/// Every path to an owner agrees with the oracle: single lookups, lookups by hash, batches, the
/// first replica.
fn check_owners(ring: &Ring, hashes: &[u32], keys: &[Vec<u8>]) -> Result<(), TestCaseError> {
    for &h in hashes.iter().chain(&[0, 1, u32::MAX]) {
        prop_assert_eq!(
            ring.lookup_hash(h).map(|n| n.name().to_string()),
            naive_owner(ring, h)
        );
    }
    let mut many = vec![None; keys.len()];
    ring.lookup_many(keys, &mut many);
    for (key, many) in keys.iter().zip(many) {
        let want = naive_owner(ring, ring.key_position(key));
        prop_assert_eq!(ring.lookup(key).map(|n| n.name().to_string()), want.clone());
        prop_assert_eq!(
            many.map(|i| ring.nodes()[i].name().to_string()),
            want.clone()
        );
        prop_assert_eq!(
            ring.replicas(key).next().map(|n| n.name().to_string()),
            want
        );
    }
    Ok(())
}

proptest! {
    /// A ring with a line table places every key as the oracle does, after a build and
    /// after every membership change (adds, removes, new weights), with colliding positions (CRC32
    /// and few vnodes) and every hash; and its table is always the one its points give.
    #[test]
    fn a_ring_with_a_line_table_places_like_the_oracle_through_changes(
        names in names_strategy(), more in names_strategy(), vnodes in 1u32..60,
        hash in proptest::sample::select(HashFunction::ALL.to_vec()),
        hashes in proptest::collection::vec(any::<u32>(), 1..64),
        keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 0..40),
        weight in 0.25f64..4.0) {
        let mut ring = Ring::builder().vnodes(vnodes).hash(hash).line_table(true)
            .nodes(names.iter().cloned()).build().unwrap();
        prop_assert!(ring.has_line_table());
        let (kept, fresh) = tables(&ring);
        prop_assert_eq!(kept, fresh);
        check_owners(&ring, &hashes, &keys)?;
        for name in more.iter().filter(|n| !names.contains(n)) {
            ring.add(name.clone(), 1.0).unwrap();
            let (kept, fresh) = tables(&ring);
            prop_assert_eq!(kept, fresh, "after adding {}", name);
            check_owners(&ring, &hashes, &keys)?;
        }
        ring.set_weight(&names[0], weight).unwrap();
        let (kept, fresh) = tables(&ring);
        prop_assert_eq!(kept, fresh);
        check_owners(&ring, &hashes, &keys)?;
        for name in names.iter().skip(1) {
            ring.remove(name).unwrap();
            let (kept, fresh) = tables(&ring);
            prop_assert_eq!(kept, fresh, "after removing {}", name);
            check_owners(&ring, &hashes, &keys)?;
        }
    }
}

#[test]
fn a_ring_with_a_line_table_follows_large_changes() {
    // 300 nodes of 160 points, grown past a power of two of points (the table and the index change
    // size) and shrunk back.
    let names: Vec<String> = (0..420)
        .map(|i| format!("10.0.{}.{}:11211", i / 256, i % 256))
        .collect();
    let mut ring = Ring::builder()
        .line_table(true)
        .nodes(names[..300].iter().cloned())
        .build()
        .unwrap();
    assert!(ring.has_line_table());
    let probes: Vec<u32> = (0..20_000u32)
        .map(|i| i.wrapping_mul(0x9E37_79B9))
        .collect();
    let check = |ring: &Ring| {
        let (kept, fresh) = tables(ring);
        assert_eq!(kept, fresh);
        let plain = Ring::builder()
            .nodes(ring.nodes().iter().map(|n| n.name().to_string()))
            .build()
            .unwrap();
        for &h in &probes {
            assert_eq!(
                ring.lookup_hash(h).map(Node::name),
                plain.lookup_hash(h).map(Node::name)
            );
        }
    };
    check(&ring);
    for name in &names[300..] {
        ring.add(name.clone(), 1.0).unwrap();
    }
    check(&ring);
    for name in &names[100..400] {
        ring.remove(name).unwrap();
    }
    check(&ring);
}

#[test]
fn a_crowded_index_places_single_and_batched_lookups_like_the_oracle() {
    for lines in [false, true] {
        crowded_ring_places_like_the_oracle(lines);
    }
}

/// [`a_crowded_index_places_single_and_batched_lookups_like_the_oracle`], with or without a line
/// table (whose line over the crowded bucket holds no points: its hashes search the points).
fn crowded_ring_places_like_the_oracle(lines: bool) {
    // No shipped hash crowds a bucket (more than `SCAN` points), so place the points by hand: 600
    // spread over the circle and 40 in one bucket, at its start, middle and end.
    let mut ring = Ring::builder()
        .vnodes(1)
        .line_table(lines)
        .nodes(["a", "b", "c"])
        .build()
        .unwrap();
    let mut state = 0x9e37_79b9_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let mut points: Vec<Point> = (0..600)
        .map(|i| Point {
            position: next(),
            node: i % 3,
        })
        .collect();
    points.extend((0..40).map(|i| Point {
        position: 0x4000_0000 + i * 0x1000,
        node: i % 3,
    }));
    let nodes = ring.nodes.clone();
    points.sort_by(|x, y| Ring::point_order(ring.scheme, &nodes, x, y));
    ring.points = points;
    ring.reindex();
    assert!(ring.index.is_crowded());
    assert_eq!(ring.has_line_table(), lines);
    let hashes = (0..2000)
        .map(|_| next())
        .chain((0..60).map(|i| 0x4000_0000 + i * 0x800))
        .chain([0, u32::MAX]);
    for hash in hashes {
        assert_eq!(
            ring.lookup_hash(hash).map(|n| n.name().to_string()),
            naive_owner(&ring, hash),
            "{hash:#x}"
        );
    }
    let keys: Vec<String> = (0..500).map(|i| format!("key:{i}")).collect();
    let mut many = vec![None; keys.len()];
    ring.lookup_many(&keys, &mut many);
    for (key, got) in keys.iter().zip(many) {
        assert_eq!(got, ring.lookup_index(key), "{key}");
    }
}

#[test]
fn a_line_table_is_kept_for_up_to_65535_nodes() {
    // A line names nodes in 16 bits, all ones meaning none.
    let names: Vec<String> = (0..65_536).map(|i| format!("n{i}")).collect();
    let mut ring = Ring::builder()
        .vnodes(1)
        .line_table(true)
        .nodes(names[..65_535].iter().cloned())
        .build()
        .unwrap();
    assert!(ring.has_line_table());
    ring.add(names[65_535].clone(), 1.0).unwrap();
    assert!(!ring.has_line_table());
    let probes: Vec<u32> = (0..300u32).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
    for &h in &probes {
        assert_eq!(
            ring.lookup_hash(h).map(|n| n.name().to_string()),
            naive_owner(&ring, h)
        );
    }
    ring.remove(&names[7]).unwrap();
    assert!(ring.has_line_table());
    let (kept, fresh) = tables(&ring);
    assert_eq!(kept, fresh);
    for &h in &probes {
        assert_eq!(
            ring.lookup_hash(h).map(|n| n.name().to_string()),
            naive_owner(&ring, h)
        );
    }
}

#[test]
fn a_line_table_is_not_kept_past_its_point_limit() {
    let mut ring = Ring::builder()
        .vnodes(1)
        .line_table(true)
        .nodes(["a", "b"])
        .build()
        .unwrap();
    assert!(ring.has_line_table());
    // More points than lines have room for (spread evenly; no need to hash that many names).
    let len = super::lines::MAX_POINTS + 1;
    let step = u32::MAX / len as u32;
    ring.points = (0..len as u32)
        .map(|i| Point {
            position: i * step,
            node: i % 2,
        })
        .collect();
    ring.reindex();
    assert!(!ring.has_line_table());
    assert!(ring.has_lookup_index());
    for h in [0, 1, step, step + 1, u32::MAX / 2, u32::MAX] {
        assert_eq!(
            ring.lookup_hash(h).map(|n| n.name().to_string()),
            naive_owner(&ring, h)
        );
    }
}

#[test]
fn a_built_ring_takes_a_line_table_and_places_as_before() {
    // A compatibility ring (twemproxy's ketama, with a hash tag), which no builder setting reaches.
    use crate::compat::twemproxy::{ketama_ring, TwemproxyServer};
    use crate::hash::TwemproxyHash;
    let servers: Vec<TwemproxyServer> = (0..50)
        .map(|i| format!("10.0.{}.{}:11211:{}", i / 10, i % 10, 1 + i % 3).parse())
        .collect::<Result<_, _>>()
        .unwrap();
    let plain = ketama_ring(&servers, TwemproxyHash::Fnv1a64, Some(*b"{}")).unwrap();
    let mut lined = plain.clone();
    assert!(!lined.has_line_table());
    lined.set_line_table(true);
    assert!(lined.has_line_table());
    let keys: Vec<String> = (0..5000)
        .map(|i| format!("{{user{}}}.k{i}", i % 97))
        .collect();
    let place = |ring: &Ring| -> Vec<Option<usize>> {
        let mut many = vec![None; keys.len()];
        ring.lookup_many(&keys, &mut many);
        let single: Vec<Option<usize>> = keys.iter().map(|k| ring.lookup_index(k)).collect();
        assert_eq!(many, single);
        single
    };
    assert_eq!(place(&lined), place(&plain));
    // Kept through changes, and dropped on request.
    let (mut plain, mut lined) = (plain, lined);
    for ring in [&mut plain, &mut lined] {
        ring.add("10.9.9.9:11211", 1.0).unwrap();
        ring.remove("10.0.1.3:11211").unwrap();
    }
    assert!(lined.has_line_table());
    assert_eq!(place(&lined), place(&plain));
    let (kept, fresh) = tables(&lined);
    assert_eq!(kept, fresh);
    lined.set_line_table(false);
    assert!(!lined.has_line_table());
    assert_eq!(place(&lined), place(&plain));
}
