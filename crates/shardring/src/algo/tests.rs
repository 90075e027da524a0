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
    assert_eq!(Algorithm::ALL.len(), 7);
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

    #[test]
    fn membership_changes_never_panic_and_stay_consistent(names in names_strategy(),
                                                           ops in proptest::collection::vec((any::<bool>(), "[a-z]{1,3}"), 0..40)) {
        for mut p in build_all(&named(&names)) {
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
