//! The CLI contract (DESIGN §3.1): output formats, exit codes, bad input.

use crate::support::shardring;
use predicates::prelude::*;

#[test]
fn lookup_prints_key_tab_node_in_input_order() {
    let out = shardring()
        .args([
            "lookup",
            "--nodes",
            "a,b=2,10.0.0.1:11211",
            "k1",
            "k2",
            "k3",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    for (line, key) in lines.iter().zip(["k1", "k2", "k3"]) {
        let (k, node) = line.split_once('\t').unwrap();
        assert_eq!(k, key);
        assert!(["a", "b", "10.0.0.1:11211"].contains(&node), "{line}");
    }
}

#[test]
fn lookup_agrees_with_the_library() {
    let ring = shardring::Ring::builder()
        .node("a", 1.0)
        .node("b", 2.0)
        .node("c", 1.0)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("user:{i}")).collect();
    let out = shardring()
        .args(["lookup", "--nodes", "c,a,b=2"])
        .write_stdin(keys.join("\n"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for (line, key) in text.lines().zip(&keys) {
        assert_eq!(line, format!("{key}\t{}", ring.lookup(key).unwrap().name()));
    }
    assert_eq!(text.lines().count(), keys.len());
}

#[test]
fn lookup_prints_the_same_whatever_the_batch() {
    // Empty lines, CRLF, no newline at the end; more keys than a batch; every algorithm.
    let mut input: Vec<u8> = (0..3000)
        .flat_map(|i| match i % 7 {
            0 => b"\n".to_vec(),
            1 => format!("crlf:{i}\r\n").into_bytes(),
            _ => format!("user:{i}\n").into_bytes(),
        })
        .collect();
    input.extend_from_slice(b"last-without-newline");
    for algo in ["ring", "jump", "maglev", "anchor"] {
        let run = |batch: &str| {
            let out = shardring()
                .args([
                    "lookup", "--nodes", "a,b,c,d", "--algo", algo, "--batch", batch,
                ])
                .write_stdin(input.clone())
                .output()
                .unwrap();
            assert!(out.status.success(), "{algo} {batch}");
            out.stdout
        };
        let one = run("1");
        let lines: Vec<&[u8]> = one.split(|&b| b == b'\n').collect();
        assert_eq!(lines.len(), 3002, "{algo}");
        assert!(lines[0].starts_with(b"\t"), "{algo}: an empty key");
        assert!(lines[1].starts_with(b"crlf:1\t"), "{algo}: CR dropped");
        assert!(lines[3000].starts_with(b"last-without-newline\t"), "{algo}");
        for batch in ["2", "16", "1024"] {
            assert!(
                run(batch) == one,
                "{algo}: --batch {batch} differs from --batch 1"
            );
        }
        if algo == "ring" {
            // A line table places every key as the ring without one, single and batched.
            for batch in ["1", "1024"] {
                let out = shardring()
                    .args([
                        "lookup",
                        "--nodes",
                        "a,b,c,d",
                        "--line-table",
                        "--batch",
                        batch,
                    ])
                    .write_stdin(input.clone())
                    .output()
                    .unwrap();
                assert!(out.status.success());
                assert!(out.stdout == one, "--line-table --batch {batch} differs");
            }
        }
    }
}

#[test]
fn lookup_reads_raw_bytes_from_stdin_and_drops_crlf() {
    let out = shardring()
        .args(["lookup", "--nodes", "a,b"])
        .write_stdin(b"\xff\xfekey\r\nplain\n".to_vec())
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<&[u8]> = out.stdout.split(|&b| b == b'\n').collect();
    assert!(lines[0].starts_with(b"\xff\xfekey\t"), "{:?}", lines[0]);
    assert!(lines[1].starts_with(b"plain\t"));
}

#[test]
fn lookup_replicas_are_distinct_and_start_with_the_owner() {
    let out = shardring()
        .args([
            "lookup",
            "--nodes",
            "a,b,c,d",
            "--replicas",
            "3",
            "some-key",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.trim_end().split('\t').collect();
    assert_eq!(fields.len(), 4);
    let mut nodes = fields[1..].to_vec();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3);
    let single = shardring()
        .args(["lookup", "--nodes", "a,b,c,d", "some-key"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(single.stdout).unwrap().trim_end(),
        format!("some-key\t{}", fields[1])
    );
    // More replicas than nodes: every node once.
    let out = shardring()
        .args(["lookup", "--nodes", "a,b", "--replicas", "5", "k"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim_end()
            .split('\t')
            .count(),
        3
    );
}

#[test]
fn bad_input_exits_2_with_a_reason_and_no_stdout() {
    let cases: &[&[&str]] = &[
        &["lookup", "--nodes", "a,b=0", "k"],
        &["lookup", "--nodes", "a,b=-1", "k"],
        &["lookup", "--nodes", "a,a", "k"],
        &["lookup", "--nodes", "", "k"],
        &["lookup", "--nodes", "a,,b", "k"],
        &["lookup", "--nodes", "a=heavy", "k"],
        &["lookup", "--nodes", "a", "--hash", "sha1", "k"],
        &["lookup", "--nodes", "a", "--algo", "nope", "k"],
        &["lookup", "--nodes", "a", "--vnodes", "0", "k"],
        &["lookup", "--nodes", "a", "--replicas", "0", "k"],
        &["lookup", "--nodes", "a", "--batch", "0", "k"],
        &[
            "lookup",
            "--nodes",
            "a",
            "--algo",
            "jump",
            "--line-table",
            "k",
        ],
        &[
            "lookup",
            "--nodes",
            "a",
            "--compat",
            "twemproxy",
            "--line-table",
            "k",
        ],
        &["lookup", "--config", "x.yml", "--line-table", "k"],
        &["lookup", "k"],
        &["lookup", "--nodes", "a", "--file", "/nonexistent/keys.txt"],
        &["lookup", "--nodes", "a", "--vnodes", "4000000000", "k"],
        &["analyze", "--nodes", "99999999999"],
        &["analyze", "--keys", "99999999999999"],
        &["ring", "--nodes", "a=nan"],
        &["ring", "--nodes", "a", "--diff"],
        &["analyze", "--nodes", "0"],
        &["analyze", "--keys", "0"],
        &["analyze", "--format", "xml"],
        &["frobnicate"],
    ];
    for args in cases {
        let out = shardring().args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        assert!(!out.stderr.is_empty(), "{args:?} gave no reason");
    }
}

#[test]
fn lookup_reads_keys_from_a_file_and_handles_huge_replica_counts() {
    let path = std::env::temp_dir().join(format!("shardring-keys-{}", std::process::id()));
    std::fs::write(&path, "a-key\nb-key\n").unwrap();
    let out = shardring()
        .args([
            "lookup",
            "--nodes",
            "x,y",
            "--replicas",
            "1000000000000",
            "--file",
        ])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("a-key\t") && lines[0].split('\t').count() == 3);
}

#[test]
fn unreadable_stdin_is_an_error() {
    // A directory as stdin cannot be read.
    let dir = std::fs::File::open(env!("CARGO_MANIFEST_DIR")).unwrap();
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args(["lookup", "--nodes", "a"])
        .stdin(dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("stdin"));
}

#[test]
fn ring_prints_the_continuum_in_order() {
    let out = shardring()
        .args(["ring", "--nodes", "a,b=2", "--vnodes", "10"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let points: Vec<(u32, &str)> = text
        .lines()
        .map(|l| {
            let (p, n) = l.split_once('\t').unwrap();
            (p.parse().unwrap(), n)
        })
        .collect();
    assert_eq!(points.len(), 30);
    assert!(points.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(points.iter().filter(|p| p.1 == "b").count(), 20);
}

#[test]
fn ring_shares_sum_to_one() {
    let out = shardring()
        .args(["ring", "--nodes", "a,b,c=2", "--shares"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let total: f64 = text
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap().parse::<f64>().unwrap())
        .sum();
    assert!((total - 1.0).abs() < 1e-4, "{text}");
    assert_eq!(text.lines().next().unwrap().split('\t').next(), Some("a"));
}

#[test]
fn ring_diff_lists_ranges_that_change_owner() {
    let out = shardring()
        .args([
            "ring",
            "--nodes",
            "a,b,c",
            "--diff",
            "--to-nodes",
            "a,b,c,d",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.is_empty());
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "{line}");
        let (first, last): (u32, u32) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        assert!(first <= last);
        assert_eq!(f[3], "d", "adding d moves keys only to d: {line}");
    }
}

#[test]
fn analyze_json_has_the_contract_fields() {
    let out = shardring()
        .args(["analyze", "--keys", "20000", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        for field in [
            "algorithm",
            "hash",
            "nodes",
            "vnodes",
            "keys",
            "mean",
            "stddev",
            "min",
            "max",
            "peak_to_mean",
            "moved_on_add",
            "ideal_on_add",
            "moved_on_remove",
            "ideal_on_remove",
            "lookup_ns",
            "lookup_batch_ns",
            "lookup_pool",
        ] {
            assert!(row.get(field).is_some(), "missing {field} in {row}");
        }
    }
    assert!(rows.iter().any(|r| r["algorithm"] == "ring"));
}

#[test]
fn analyze_table_and_plot() {
    let dir = std::env::temp_dir().join(format!("shardring-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("spread.svg");
    shardring()
        .args(["analyze", "--keys", "10000", "--algo", "ring", "--plot"])
        .arg(&svg)
        .assert()
        .success()
        .stdout(predicate::str::contains("peak/mean").and(predicate::str::contains("ring")));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.starts_with("<svg") && drawn.contains("ring"),
        "{drawn:.200}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plot_refuses_a_name_that_is_not_svg() {
    for name in ["x.png", "plot", "x.svg.png"] {
        shardring()
            .args(["analyze", "--keys", "1000", "--plot", name])
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicate::str::contains("must end in .svg"));
        assert!(!std::path::Path::new(name).exists());
    }
}
