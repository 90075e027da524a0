//! `shardring simulate` (DESIGN §3.1): the JSON contract and the acceptance figures.

use assert_cmd::Command;
use serde_json::Value;

fn simulate(args: &[&str]) -> Vec<Value> {
    let out = Command::cargo_bin("shardring")
        .unwrap()
        .arg("simulate")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    parsed.as_array().expect("a JSON array").clone()
}

fn peaks(rounds: &[Value]) -> Vec<f64> {
    rounds
        .iter()
        .map(|r| r["peak_to_mean"].as_f64().unwrap())
        .collect()
}

#[test]
fn one_object_per_round_with_the_contract_fields() {
    let rounds = simulate(&[
        "--nodes",
        "4",
        "--vnodes",
        "10",
        "--requests",
        "2000",
        "--rounds",
        "3",
    ]);
    assert_eq!(rounds.len(), 3);
    for (i, r) in rounds.iter().enumerate() {
        assert_eq!(r["round"].as_u64(), Some(i as u64 + 1));
        assert!(r["peak_to_mean"].as_f64().unwrap() >= 1.0);
        for field in ["max_node", "min_node"] {
            assert!(r[field].as_str().unwrap().starts_with("node-"), "{r}");
        }
        let points = r["points"].as_object().unwrap();
        assert_eq!(points.len(), 4);
        assert!(points.values().all(|p| p.as_u64() == Some(10)));
        let served: u64 = r["requests"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(served, 2000);
        assert!(r.get("rebalance").is_none(), "no rebalancer asked for");
    }
}

/// The acceptance: `--workload uniform --nodes 20 --vnodes 20 --rebalance` gets peak/mean below
/// 1.25 within 10 rounds (with the default seed it does in round 5).
#[test]
fn rebalancing_uniform_traffic_gets_below_1_25_within_10_rounds() {
    let rounds = simulate(&[
        "--workload",
        "uniform",
        "--nodes",
        "20",
        "--vnodes",
        "20",
        "--rebalance",
    ]);
    assert_eq!(rounds.len(), 10);
    let peaks = peaks(&rounds);
    assert!(peaks[0] > 1.25, "nothing to fix: {peaks:?}");
    let first = peaks.iter().position(|&p| p < 1.25);
    assert!(first.is_some(), "never below 1.25: {peaks:?}");
    assert_eq!(rounds[0]["rebalance"], "rebalanced");
    // Point counts move, within the default bounds [vnodes/4, 4 × vnodes].
    let last = rounds[9]["points"].as_object().unwrap();
    assert!(last.values().any(|p| p.as_u64() != Some(20)));
    assert!(last
        .values()
        .all(|p| (5..=80).contains(&p.as_u64().unwrap())));
}

/// The acceptance: under zipf:1.1, `--bounded 1.25` keeps peak/mean at most 1.25 where plain
/// lookups exceed it.
#[test]
fn bounded_loads_cap_zipf_traffic_where_plain_lookups_do_not() {
    let common = ["--workload", "zipf:1.1", "--nodes", "20", "--rounds", "3"];
    let plain = peaks(&simulate(&common));
    assert!(plain.iter().all(|&p| p > 1.25), "{plain:?}");
    let bounded_args: Vec<&str> = common
        .iter()
        .copied()
        .chain(["--bounded", "1.25"])
        .collect();
    let bounded = peaks(&simulate(&bounded_args));
    // ⌈1.25 × 100,000 / 20⌉ = 6250 = exactly 1.25 × the mean of 5000.
    assert!(bounded.iter().all(|&p| p <= 1.25 + 1e-12), "{bounded:?}");
}

#[test]
fn rebalancer_settings_reach_the_rebalancer() {
    // Threshold 10: nothing is ever imbalanced enough, so points never move.
    let rounds = simulate(&[
        "--nodes",
        "5",
        "--vnodes",
        "10",
        "--requests",
        "5000",
        "--rounds",
        "3",
        "--rebalance",
        "--threshold",
        "10",
        "--damping",
        "1",
        "--min-points",
        "2",
        "--max-points",
        "40",
        "--min-samples",
        "100",
    ]);
    assert!(rounds.iter().all(|r| r["rebalance"] == "balanced"));
    let points = rounds[2]["points"].as_object().unwrap();
    assert!(points.values().all(|p| p.as_u64() == Some(10)));
}

#[test]
fn the_seed_fixes_the_output() {
    let args = [
        "--workload",
        "zipf:0.9",
        "--nodes",
        "5",
        "--requests",
        "5000",
        "--rounds",
        "2",
    ];
    let run = |seed: &str| {
        let mut a = args.to_vec();
        a.extend(["--seed", seed]);
        simulate(&a)
    };
    assert_eq!(run("7"), run("7"));
    assert_ne!(run("7"), run("8"));
}

#[test]
fn bad_settings_exit_2_with_nothing_on_stdout() {
    for bad in [
        &["--workload", "zipf:abc"][..],
        &["--workload", "pareto"],
        &["--bounded", "0.9"],
        &["--nodes", "0"],
        &["--rounds", "0"],
        &["--vnodes", "0"],
        &["--damping", "0.5"],
        &["--rebalance", "--damping", "1.5"],
        &["--rebalance", "--min-points", "10", "--max-points", "5"],
    ] {
        let out = Command::cargo_bin("shardring")
            .unwrap()
            .arg("simulate")
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
        assert!(!out.stderr.is_empty(), "{bad:?}");
    }
}
