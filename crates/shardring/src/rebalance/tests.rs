use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::shared::SharedRing;

fn shared(nodes: usize, vnodes: u32) -> Arc<SharedRing<Ring>> {
    let ring = Ring::builder()
        .vnodes(vnodes)
        .nodes((0..nodes).map(|i| format!("node-{i}")))
        .build()
        .unwrap();
    Arc::new(SharedRing::new(ring))
}

#[test]
fn builder_defaults_are_relative_to_vnodes_and_validated() {
    let s = shared(3, 40);
    let r = Rebalancer::builder().build(Arc::clone(&s)).unwrap();
    assert_eq!((r.min_points(), r.max_points()), (10, 160));
    assert_eq!(r.threshold(), DEFAULT_THRESHOLD);
    assert_eq!(r.min_samples(), DEFAULT_MIN_SAMPLES);
    assert_eq!(r.interval(), DEFAULT_INTERVAL);
    assert_eq!(r.damping(), DEFAULT_DAMPING);
    let bad = [
        Rebalancer::builder().min_points(0),
        Rebalancer::builder().min_points(5).max_points(4),
        Rebalancer::builder().threshold(-0.1),
        Rebalancer::builder().threshold(f64::NAN),
        Rebalancer::builder().interval(Duration::ZERO),
        Rebalancer::builder().damping(0.0),
        Rebalancer::builder().damping(1.5),
    ];
    for b in bad {
        assert!(matches!(
            b.build(Arc::clone(&s)),
            Err(Error::InvalidSetting { .. })
        ));
    }
}

#[test]
fn waits_for_samples_then_rebalances_by_load_ratio() {
    let s = shared(4, 40);
    let r = Rebalancer::builder()
        .min_points(5)
        .max_points(200)
        .damping(1.0)
        .build(Arc::clone(&s))
        .unwrap();
    s.load().load().add(0, 500);
    assert_eq!(
        r.rebalance_once().unwrap(),
        RebalanceOutcome::TooFewSamples {
            samples: 500,
            needed: 1000
        }
    );
    // Mean 625: node 0 has 1.6 × the mean, node 1 0.4 ×, nodes 2 and 3 exactly the mean.
    s.load().load().add(0, 500);
    s.load().load().add(1, 250);
    s.load().load().add(2, 625);
    s.load().load().add(3, 625);
    let outcome = r.rebalance_once().unwrap();
    assert!(matches!(
        outcome,
        RebalanceOutcome::Rebalanced { generation: 1, .. }
    ));
    assert_eq!(s.load().point_counts(), vec![25, 100, 40, 40]);
    assert_eq!(
        s.load_stats().total,
        0.0,
        "a new ring starts with new counters"
    );
    // The node that lost points kept its first 20.
    let before: Vec<u32> = shared(4, 40).load().node_points("node-0").collect();
    let after: Vec<u32> = s.load().node_points("node-0").collect();
    assert!(after.iter().all(|p| before.contains(p)));
}

#[test]
fn balanced_traffic_only_resets_the_window() {
    let s = shared(2, 40);
    let r = Rebalancer::builder().build(Arc::clone(&s)).unwrap();
    s.load().load().add(0, 1000);
    s.load().load().add(1, 1100);
    assert!(matches!(
        r.rebalance_once().unwrap(),
        RebalanceOutcome::Balanced { .. }
    ));
    assert_eq!(s.generation(), 0);
    assert_eq!(s.load_stats().total, 0.0);
}

#[test]
fn a_single_hot_key_is_never_split() {
    let s = shared(3, 40);
    let r = Rebalancer::builder()
        .min_points(10)
        .build(Arc::clone(&s))
        .unwrap();
    for _ in 0..6 {
        for _ in 0..2000 {
            s.load().lookup_counted("hot");
        }
        // Whatever points move, the one key's traffic lands on one node: peak = 3 × mean, every time.
        let imbalance = match r.rebalance_once().unwrap() {
            RebalanceOutcome::Rebalanced { imbalance, .. } => imbalance,
            RebalanceOutcome::AtBounds { imbalance } => imbalance,
            other => panic!("{other:?}"),
        };
        assert!((imbalance - 2.0).abs() < 1e-9, "{imbalance}");
        let points = s.load().point_counts();
        assert!(points.iter().all(|p| (10..=160).contains(p)), "{points:?}");
    }
}

#[test]
fn background_thread_rebalances_and_stops_when_dropped() {
    let s = shared(3, 40);
    let handle = Rebalancer::builder()
        .interval(Duration::from_millis(5))
        .build(Arc::clone(&s))
        .unwrap()
        .spawn()
        .unwrap();
    s.load().load().add(0, 3000);
    // Bounded wait: up to 400 polls for the thread to act.
    for _ in 0..400 {
        if handle.status().rebalances > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = handle.stop();
    assert!(status.rebalances >= 1, "{status:?}");
    assert!(status.last_error.is_none());
    let generation = s.generation();
    s.load().load().add(0, 3000);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(s.generation(), generation, "the thread ran after stop");
    // Dropping (rather than stopping) also joins.
    drop(
        Rebalancer::builder()
            .interval(Duration::from_secs(3600))
            .build(s)
            .unwrap()
            .spawn()
            .unwrap(),
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the traffic, one run leaves every node within [min_points, max_points] and no node leaves
    /// the ring.
    #[test]
    fn rebalancing_keeps_points_in_bounds_and_the_ring_whole(
        vnodes in 1u32..60,
        min in 1usize..30,
        extra in 0usize..60,
        loads in prop::collection::vec(0u64..5000, 1..8),
        threshold in 0.0f64..1.0,
        damping in 0.1f64..=1.0,
    ) {
        let max = min + extra;
        let s = shared(loads.len(), vnodes);
        let r = Rebalancer::builder()
            .min_points(min)
            .max_points(max)
            .threshold(threshold)
            .damping(damping)
            .min_samples(1)
            .build(Arc::clone(&s))
            .unwrap();
        for (i, &l) in loads.iter().enumerate() {
            s.load().load().add(i, l);
        }
        let outcome = r.rebalance_once().unwrap();
        let ring = s.load();
        prop_assert_eq!(ring.len(), loads.len());
        if let RebalanceOutcome::Rebalanced { .. } = outcome {
            for &p in &ring.point_counts() {
                prop_assert!((min..=max).contains(&p), "{} points outside [{}, {}]", p, min, max);
            }
        }
    }

    /// The scaling rule itself, against its one-line definition.
    #[test]
    fn scaled_points_stay_within_bounds(
        pairs in prop::collection::vec((1usize..500, 0u64..10_000), 1..20),
        min in 1usize..50,
        extra in 0usize..500,
        damping in 0.01f64..=1.0,
    ) {
        let (points, loads): (Vec<usize>, Vec<u64>) = pairs.into_iter().unzip();
        let planned = scale_points(&points, &loads, damping, min, min + extra);
        let mean = loads.iter().sum::<u64>() as f64 / loads.len() as f64;
        for ((&p, &l), &n) in points.iter().zip(&loads).zip(&planned) {
            prop_assert!(n >= min && n <= min + extra);
            if l > 0 {
                let naive = ((p as f64 * (mean / l as f64).powf(damping)).round() as usize).clamp(min, min + extra);
                prop_assert_eq!(n, naive);
            }
        }
    }
}

/// Readers on every core route skewed traffic while the background rebalancer runs every millisecond and
/// a writer adds and removes a node: nothing panics, readers always get an answer, and every run leaves
/// point counts within bounds. Bounded by iteration counts.
#[test]
fn background_rebalancing_under_concurrent_readers_and_membership_changes() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let s = shared(6, 40);
    let handle = Rebalancer::builder()
        .min_points(10)
        .max_points(160)
        .min_samples(500)
        .interval(Duration::from_millis(1))
        .build(Arc::clone(&s))
        .unwrap()
        .spawn()
        .unwrap();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for r in 0..cores {
            let (s, done) = (&s, &done);
            scope.spawn(move || {
                for i in 0..200_000u64 {
                    // Relaxed: the flag carries no data; it only ends the loop early.
                    if done.load(Ordering::Relaxed) && i > 1000 {
                        break;
                    }
                    // Skewed: a quarter of requests for one key.
                    let key = if i % 4 == 0 { 0 } else { i * 31 + r as u64 };
                    assert!(s.load().lookup_counted(key.to_le_bytes()).is_some());
                }
            });
        }
        for op in 0..100 {
            if op % 2 == 0 {
                s.add(crate::Node::new("extra").unwrap()).unwrap();
            } else {
                s.remove("extra").unwrap();
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        // Bounded wait for the rebalancer to have judged a few windows alongside the readers.
        for _ in 0..400 {
            if handle.status().runs >= 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        done.store(true, Ordering::Relaxed);
    });
    let status = handle.stop();
    assert!(status.last_error.is_none(), "{status:?}");
    assert!(status.runs >= 3, "{status:?}");
    let ring = s.load();
    assert_eq!(ring.len(), 6);
    assert!(ring.point_counts().iter().all(|p| (10..=160).contains(p)));
    assert!(s.generation() >= 100);
}
