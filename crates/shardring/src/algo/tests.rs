//! Tests every algorithm must pass: the trait's promises, the errors, and the acceptance figure.

use proptest::prelude::*;

use super::*;
use crate::analysis::{spread, KeySet};

fn named(names: &[String]) -> Vec<Node> {
    names
        .iter()
        .map(|n| Node::new(n.clone()).unwrap())
        .collect()
}

fn build_all(nodes: &[Node]) -> Vec<Box<dyn Placement>> {
    Algorithm::ALL
        .iter()
        .map(|&a| build(a, nodes, &AlgorithmOptions::default()).unwrap())
        .collect()
}

#[test]
fn names_round_trip_and_match_the_placements() {
    let nodes = named(&["a".into(), "b".into()]);
    for &a in Algorithm::ALL {
        assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        assert_eq!(
            a.to_string().to_uppercase().parse::<Algorithm>().unwrap(),
            a
        );
        let p = build(a, &nodes, &AlgorithmOptions::default()).unwrap();
        assert_eq!(p.algorithm(), a.name());
    }
    assert_eq!(
        "multi-probe".parse::<Algorithm>().unwrap(),
        Algorithm::MultiProbe
    );
    let err = "consistent".parse::<Algorithm>().unwrap_err();
    assert!(err.to_string().contains("memento"), "{err}");
    assert_eq!(Algorithm::ALL.len(), 8);
    assert_eq!(
        "jump-back".parse::<Algorithm>().unwrap(),
        Algorithm::JumpBack
    );
}

#[test]
fn empty_placements_answer_none_and_refuse_unknown_removals() {
    for &a in Algorithm::ALL {
        let mut p = build(a, &[], &AlgorithmOptions::default()).unwrap();
        assert_eq!(p.locate(b"key"), None, "{a}");
        assert!(p.lookup(b"key").is_none(), "{a}");
        let mut out = vec![7, 8];
        p.replicas_into(b"key", 3, &mut out);
        assert!(out.is_empty(), "{a}");
        assert!(
            matches!(p.remove("ghost"), Err(Error::UnknownNode { .. })),
            "{a}"
        );
        p.add(Node::new("only").unwrap()).unwrap();
        assert_eq!(p.locate(b"key"), Some(0), "{a}");
        p.remove("only").unwrap();
        assert_eq!(p.locate(b"key"), None, "{a}");
    }
}

#[test]
fn duplicates_and_weights_are_typed_errors() {
    let dup = named(&["x".into(), "y".into(), "x".into()]);
    let weighted = vec![Node::new("a").unwrap(), Node::weighted("b", 2.0).unwrap()];
    for &a in Algorithm::ALL {
        assert!(
            matches!(
                build(a, &dup, &AlgorithmOptions::default()),
                Err(Error::DuplicateNode { .. })
            ),
            "{a}"
        );
        let result = build(a, &weighted, &AlgorithmOptions::default());
        if a.supports_weights() {
            assert!(result.is_ok(), "{a}");
        } else {
            assert!(matches!(result, Err(Error::Unsupported { .. })), "{a}");
        }
        let mut p = build(a, &named(&["x".into()]), &AlgorithmOptions::default()).unwrap();
        assert!(
            matches!(
                p.add(Node::new("x").unwrap()),
                Err(Error::DuplicateNode { .. })
            ),
            "{a}"
        );
        assert_eq!(
            p.nodes().len(),
            1,
            "{a}: an error must leave the placement unchanged"
        );
    }
}

#[test]
fn invalid_options_are_refused() {
    let nodes = named(&["a".into()]);
    let zero_probes = AlgorithmOptions {
        probes: 0,
        ..AlgorithmOptions::default()
    };
    assert!(matches!(
        build(Algorithm::MultiProbe, &nodes, &zero_probes),
        Err(Error::InvalidSetting { .. })
    ));
    let zero_table = AlgorithmOptions {
        maglev_table_size: Some(0),
        ..AlgorithmOptions::default()
    };
    assert!(matches!(
        build(Algorithm::Maglev, &nodes, &zero_table),
        Err(Error::InvalidSetting { .. })
    ));
    let zero_capacity = AlgorithmOptions {
        anchor_capacity: Some(0),
        ..AlgorithmOptions::default()
    };
    assert!(matches!(
        build(Algorithm::Anchor, &nodes, &zero_capacity),
        Err(Error::InvalidSetting { .. })
    ));
    let zero_vnodes = AlgorithmOptions {
        vnodes: 0,
        ..AlgorithmOptions::default()
    };
    assert!(build(Algorithm::Ring, &nodes, &zero_vnodes).is_err());
}

/// The acceptance figure: at 100 nodes and 300,000 synthetic keys, every algorithm but the
/// 160-point ring has a peak-to-mean ratio of at most 1.12. Checked for two naming styles.
#[test]
fn acceptance_peak_to_mean_at_100_nodes_and_300k_keys() {
    let keys = KeySet::synthetic(300_000);
    for style in 0..2 {
        let names: Vec<String> = (0..100)
            .map(|i| match style {
                0 => format!("node-{i}"),
                _ => format!("10.0.{}.{}:11211", i / 256, i % 256),
            })
            .collect();
        let nodes = named(&names);
        for &a in Algorithm::ALL {
            if a == Algorithm::Ring {
                continue;
            }
            let p = build(a, &nodes, &AlgorithmOptions::default()).unwrap();
            let s = spread(p.as_ref(), &keys);
            assert_eq!(s.counts.iter().map(|c| c.1).sum::<u64>(), 300_000);
            assert!(
                s.peak_to_mean <= 1.12,
                "{a} ({}): {}",
                names[0],
                s.peak_to_mean
            );
        }
    }
}

fn names_strategy() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::hash_set("[a-z0-9:.]{1,10}", 0..25).prop_map(|s| s.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn replicas_are_distinct_and_the_first_is_the_owner(names in names_strategy(), count in 0usize..30,
                                                        keys in proptest::collection::vec(any::<Vec<u8>>(), 1..20)) {
        let nodes = named(&names);
        let mut out = Vec::new();
        for p in build_all(&nodes) {
            for key in &keys {
                p.replicas_into(key, count, &mut out);
                prop_assert_eq!(out.len(), count.min(nodes.len()), "{}", p.algorithm());
                if count > 0 {
                    prop_assert_eq!(out.first().copied(), p.locate(key), "{}", p.algorithm());
                }
                let mut sorted = out.clone();
                sorted.sort_unstable();
                sorted.dedup();
                prop_assert_eq!(sorted.len(), out.len(), "{} repeated a node: {:?}", p.algorithm(), out);
                prop_assert!(out.iter().all(|&i| i < nodes.len()));
            }
        }
    }

    /// For the algorithms whose single-node placement is exact (only the removed node's keys move),
    /// replica lists are stable too: removing a node that is not among a key's replicas leaves that
    /// key's replica list as it was. For the ring and rendezvous, removing one that is among them only
    /// drops it and appends one node (for multi-probe, anchor and memento the new owner may start a
    /// different list).
    #[test]
    fn replica_lists_survive_removals_of_other_nodes(names in names_strategy(), count in 1usize..6,
                                                     pick in any::<prop::sample::Index>(),
                                                     keys in proptest::collection::vec(any::<Vec<u8>>(), 1..30)) {
        prop_assume!(names.len() > count + 1);
        let nodes = named(&names);
        let gone = names[pick.index(names.len())].clone();
        for algorithm in [Algorithm::Ring, Algorithm::Rendezvous, Algorithm::MultiProbe, Algorithm::Anchor, Algorithm::Memento] {
            let before = build(algorithm, &nodes, &AlgorithmOptions::default()).unwrap();
            let mut after = before.clone();
            after.remove(&gone).unwrap();
            let (mut b, mut a) = (Vec::new(), Vec::new());
            for key in &keys {
                before.replicas_into(key, count, &mut b);
                after.replicas_into(key, count, &mut a);
                let b: Vec<&str> = b.iter().map(|&i| before.nodes()[i].name()).collect();
                let a: Vec<&str> = a.iter().map(|&i| after.nodes()[i].name()).collect();
                if !b.contains(&gone.as_str()) {
                    prop_assert_eq!(&a, &b, "{}", algorithm);
                } else if matches!(algorithm, Algorithm::Ring | Algorithm::Rendezvous) {
                    // Walk order and score order survive: the others keep their ranks.
                    let kept: Vec<&str> = b.iter().copied().filter(|n| *n != gone).collect();
                    prop_assert_eq!(&a[..kept.len()], &kept[..], "{}: {:?} -> {:?}", algorithm, b, a);
                }
            }
        }
    }

    #[test]
    fn membership_changes_never_panic_and_stay_consistent(names in names_strategy(),
                                                           ops in proptest::collection::vec((any::<bool>(), "[a-z]{1,3}"), 0..40)) {
        // A small maglev table: every change refills it, and the default 65,537 slots make this slow.
        let options = AlgorithmOptions { maglev_table_size: Some(1009), ..AlgorithmOptions::default() };
        for &a in Algorithm::ALL {
            let mut p = build(a, &named(&names), &options).unwrap();
            for (add, name) in &ops {
                let had = p.nodes().iter().any(|n| n.name() == name.as_str());
                let result = if *add {
                    p.add(Node::new(name.clone()).unwrap()).map(|_| ())
                } else {
                    p.remove(name).map(|_| ())
                };
                let has = p.nodes().iter().any(|n| n.name() == name.as_str());
                match (add, result.is_ok()) {
                    (true, true) => prop_assert!(!had && has),
                    (false, true) => prop_assert!(had && !has),
                    // Refused: unchanged (or, for anchor, full).
                    (_, false) => prop_assert_eq!(had, has),
                }
                if let Some(i) = p.locate(b"probe") {
                    prop_assert!(i < p.nodes().len());
                } else {
                    prop_assert!(p.nodes().is_empty());
                }
            }
        }
    }
}

/// A long deterministic history of additions and removals on every algorithm that promises exact
/// movement (anchor, memento, rendezvous, multi-probe): after each change, check that only the removed
/// node's keys moved, or only keys to the added node. Long histories reach states (deep removal
/// chains, re-added buckets) that short property-test histories rarely do.
#[test]
fn long_histories_move_exactly_the_changed_nodes_keys() {
    let keys: Vec<u64> = (0..1000u64).map(|i| fmix64(i + 1)).collect();
    let start = named(&(0..40).map(|i| format!("s{i}")).collect::<Vec<_>>());
    let options = AlgorithmOptions {
        anchor_capacity: Some(90),
        ..AlgorithmOptions::default()
    };
    for algorithm in [
        Algorithm::Anchor,
        Algorithm::Memento,
        Algorithm::Rendezvous,
        Algorithm::MultiProbe,
    ] {
        let mut p = build(algorithm, &start, &options).unwrap();
        let mut rng = 0x1234_5678_u64;
        let mut fresh = 0;
        for _ in 0..250 {
            rng = rng
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let before: Vec<String> = keys
                .iter()
                .map(|k| p.lookup(&k.to_le_bytes()).unwrap().name().to_string())
                .collect();
            let n = p.nodes().len();
            let remove = n > 1 && (n >= 80 || (rng >> 40).is_multiple_of(2));
            let changed = if remove {
                let name = p.nodes()[(rng >> 20) as usize % n].name().to_string();
                p.remove(&name).unwrap();
                name
            } else {
                fresh += 1;
                let name = format!("f{fresh}");
                p.add(Node::new(name.clone()).unwrap()).unwrap();
                name
            };
            for (k, old) in keys.iter().zip(&before) {
                let new = p.lookup(&k.to_le_bytes()).unwrap().name();
                if remove {
                    assert!(
                        old == new || *old == changed,
                        "{algorithm}: {old} -> {new} removing {changed}"
                    );
                } else {
                    assert!(
                        old == new || new == changed,
                        "{algorithm}: {old} -> {new} adding {changed}"
                    );
                }
            }
        }
    }
}

/// FNV-1a over the owner names of `keys`, in order.
fn digest(p: &dyn Placement, keys: &KeySet) -> u64 {
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for key in keys.iter() {
        for &b in p.lookup(key).unwrap().name().as_bytes() {
            digest = (digest ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    digest
}

/// Placement is part of the contract between processes and releases: pin a digest of where 2,000
/// keys go on 10 nodes, per algorithm. A change here means every deployed client would disagree with
/// the new version; change the constants only on purpose, with a changelog entry.
#[test]
fn placements_are_pinned() {
    let nodes = named(&(0..10).map(|i| format!("node-{i}")).collect::<Vec<_>>());
    let keys = KeySet::synthetic(2000);
    let mut digests = Vec::new();
    // The ring pins its own placement in ring/tests.rs.
    for &a in Algorithm::ALL.iter().filter(|&&a| a != Algorithm::Ring) {
        let p = build(a, &nodes, &AlgorithmOptions::default()).unwrap();
        digests.push((a.name(), digest(p.as_ref(), &keys)));
    }
    let pinned: &[(&str, u64)] = &[
        ("jump", 0x0ce1_5759_97d0_6f2a),
        ("jumpback", 0x1bc0_8127_c624_1e8b),
        ("rendezvous", 0x29f2_0e2a_e879_b390),
        ("maglev", 0x87cf_a6bb_23dd_86c8),
        ("multiprobe", 0x2936_5bed_ad7d_b067),
        ("anchor", 0x6a9c_80be_aae3_59b1),
        // Without removals memento is jump.
        ("memento", 0x0ce1_5759_97d0_6f2a),
    ];
    assert_eq!(digests, pinned);

    // Weighted placements take other code paths (logarithms, weighted turns): pin them too.
    let weighted: Vec<Node> = (0..10)
        .map(|i| Node::weighted(format!("node-{i}"), 0.5 + f64::from(i % 4)).unwrap())
        .collect();
    let mut digests = Vec::new();
    for a in [Algorithm::Rendezvous, Algorithm::Maglev] {
        let p = build(a, &weighted, &AlgorithmOptions::default()).unwrap();
        digests.push((a.name(), digest(p.as_ref(), &keys)));
    }
    let pinned: &[(&str, u64)] = &[
        ("rendezvous", 0x3074_54bf_a5ac_3ab7),
        ("maglev", 0x1e67_a3ca_8e28_3b5d),
    ];
    assert_eq!(digests, pinned);
}

proptest! {
    /// `locate_many` (the trait's default loop, or an algorithm's own) places every key of a batch as
    /// `locate` does, for every algorithm, over batches of every length around the ring's pass size.
    #[test]
    fn every_algorithm_places_a_batch_like_single_keys(
        names in proptest::collection::btree_set("[a-z0-9]{1,8}", 1..20),
        keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 0..60)) {
        let names: Vec<String> = names.into_iter().collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for placement in build_all(&named(&names)).into_iter().chain(build_all(&[])) {
            let mut many = vec![Some(usize::MAX); keys.len()];
            placement.locate_many(&keys, &mut many);
            let single: Vec<Option<usize>> = keys.iter().map(|k| placement.locate(k)).collect();
            prop_assert_eq!(many, single, "{}", placement.algorithm());
        }
    }
}
