//! `shardring lookup --config` and `--compat`: the same answers as the real programs' goldens, and
//! configuration errors reported all at once with exit status 2 and nothing on stdout.

use std::path::PathBuf;

use crate::support::shardring;
use assert_cmd::Command;

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A golden's `(key, server)` rows.
type Rows = Vec<(Vec<u8>, String)>;
/// A golden's `# name: value` header lines.
type Header = Vec<(String, String)>;

/// The golden's rows and header.
fn golden(rel: &str) -> (Rows, Header) {
    let text = std::fs::read_to_string(testdata(rel)).unwrap();
    let mut rows = Vec::new();
    let mut header = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("# ") {
            if let Some((k, v)) = h.split_once(": ") {
                header.push((k.to_string(), v.to_string()));
            }
        } else if let Some((k, v)) = line.split_once('\t') {
            rows.push((unhex(k), v.to_string()));
        }
    }
    (rows, header)
}

/// Feeds the golden's keys on stdin and requires every output line to be `KEY<TAB>SERVER` as golden.
fn check(mut cmd: Command, rows: &[(Vec<u8>, String)]) {
    let mut input = Vec::new();
    for (k, _) in rows {
        input.extend_from_slice(k);
        input.push(b'\n');
    }
    let out = cmd
        .write_stdin(input)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines: Vec<&[u8]> = out
        .strip_suffix(b"\n")
        .unwrap()
        .split(|&b| b == b'\n')
        .collect();
    assert_eq!(lines.len(), rows.len());
    for (line, (key, server)) in lines.iter().zip(rows) {
        let mut want = key.clone();
        want.push(b'\t');
        want.extend_from_slice(server.as_bytes());
        assert_eq!(*line, want.as_slice());
    }
}

#[test]
fn config_reproduces_nutcracker() {
    for pool in [
        "ketama-named-md5",
        "ketama-port11211-fnv1a_64",
        "ketama-hashtag-braces-fnv1a_64",
        "ketama-equal3-hsieh",
        "modula-many40-md5",
    ] {
        let (rows, _) = golden(&format!("twemproxy/{pool}.tsv"));
        // Batched (the default), one key at a time, and batches that end mid-file.
        for batch in [None, Some("1"), Some("7")] {
            let mut cmd = shardring();
            cmd.arg("lookup")
                .arg("--config")
                .arg(testdata(&format!("twemproxy/{pool}.yml")));
            if let Some(batch) = batch {
                cmd.args(["--batch", batch]);
            }
            check(cmd, &rows);
        }
    }
}

#[test]
fn compat_modes_reproduce_their_programs() {
    // libmemcached: servers are host:port:weight in the header.
    for (file, mode) in [
        ("libmemcached/ketama-many40.tsv", "libmemcached"),
        (
            "libmemcached/ketama-weighted-port11211.tsv",
            "libmemcached-weighted",
        ),
        ("libmemcached/spy-equal3.tsv", "libmemcached-spy"),
        (
            "libmemcached/spy-weighted-unequal.tsv",
            "libmemcached-spy-weighted",
        ),
        ("libmemcached/ketama-hash-crc.tsv", "libmemcached"),
    ] {
        let (rows, header) = golden(file);
        let get = |k: &str| header.iter().find(|(h, _)| h == k).unwrap().1.clone();
        let nodes: Vec<String> = get("servers")
            .split(' ')
            .map(|s| {
                let (hp, w) = s.rsplit_once(':').unwrap();
                format!("{hp}={w}")
            })
            .collect();
        let mut cmd = shardring();
        cmd.args(["lookup", "--compat", mode, "--nodes", &nodes.join(",")]);
        if get("hash") != "-" {
            cmd.args(["--hash", &get("hash")]);
        }
        check(cmd, &rows);
    }
    // nginx and uhashring: name=weight lists in the header.
    for (file, mode, key) in [
        ("nginx/many40.tsv", "nginx", "servers"),
        ("uhashring/unequal.tsv", "uhashring", "nodes"),
        ("uhashring/equal3.tsv", "libketama", "nodes"),
    ] {
        let (rows, header) = golden(file);
        let nodes = header
            .iter()
            .find(|(h, _)| h == key)
            .unwrap()
            .1
            .replace(' ', ",");
        let mut cmd = shardring();
        cmd.args(["lookup", "--compat", mode, "--nodes", &nodes]);
        check(cmd, &rows);
    }
    // twemproxy from a node list: the equal3 pool is 127.0.0.1:31001..31003, weight 1.
    let (rows, _) = golden("twemproxy/ketama-equal3-crc16.tsv");
    let mut cmd = shardring();
    cmd.args([
        "lookup",
        "--compat",
        "twemproxy",
        "--hash",
        "crc16",
        "--nodes",
        "127.0.0.1:31001,127.0.0.1:31002,127.0.0.1:31003",
    ]);
    check(cmd, &rows);
}

#[test]
fn a_bad_config_lists_every_problem_and_exits_2() {
    let dir = tempfile_dir();
    let path = dir.join("bad.yml");
    std::fs::write(
        &path,
        "alpha:\n  listen: 127.0.0.1\n  hash: sha1\n  colour: blue\n  servers:\n   - 10.0.0.1:0:1\n   - 10.0.0.2:11211:0\nbeta:\n  servers:\n   - 10.0.0.1:11211:1\n",
    )
    .unwrap();
    let out = shardring()
        .arg("lookup")
        .arg("--config")
        .arg(&path)
        .arg("k")
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    for needle in [
        "6 problems",
        "line 2: alpha.listen",
        "line 3: alpha.hash",
        "line 4: alpha.colour",
        "line 6: alpha.servers",
        "line 7: alpha.servers",
        "line 8: beta",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from:\n{err}");
    }
}

#[test]
fn usage_errors_exit_2_with_nothing_on_stdout() {
    let two_pools = testdata("twemproxy-config/two-pools.yml");
    let random = tempfile_dir().join("random.yml");
    std::fs::write(
        &random,
        "p:\n  listen: 127.0.0.1:22121\n  distribution: random\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1\n",
    )
    .unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["--config".into(), two_pools.display().to_string()],
        vec![
            "--config".into(),
            two_pools.display().to_string(),
            "--pool".into(),
            "nope".into(),
        ],
        vec!["--config".into(), random.display().to_string()],
        vec!["--config".into(), "/nonexistent/nutcracker.yml".into()],
        vec![
            "--config".into(),
            two_pools.display().to_string(),
            "--nodes".into(),
            "a".into(),
        ],
        vec![
            "--compat".into(),
            "ketama".into(),
            "--nodes".into(),
            "a:1".into(),
        ],
        vec![
            "--compat".into(),
            "uhashring".into(),
            "--nodes".into(),
            "a".into(),
            "--hash".into(),
            "md5".into(),
        ],
        vec![
            "--compat".into(),
            "twemproxy".into(),
            "--nodes".into(),
            "a:1".into(),
            "--hash".into(),
            "fnv1a-64".into(),
        ],
        vec![
            "--compat".into(),
            "twemproxy".into(),
            "--nodes".into(),
            "no-port".into(),
        ],
        vec![
            "--compat".into(),
            "libmemcached".into(),
            "--nodes".into(),
            "a:1=1.5".into(),
        ],
        vec![
            "--compat".into(),
            "libmemcached".into(),
            "--nodes".into(),
            "a:1".into(),
            "--hash".into(),
            "hsieh".into(),
        ],
        vec![
            "--compat".into(),
            "nginx".into(),
            "--nodes".into(),
            "a".into(),
            "--algo".into(),
            "jump".into(),
        ],
        vec!["--pool".into(), "p".into(), "--nodes".into(), "a".into()],
    ];
    for args in cases {
        let out = shardring()
            .arg("lookup")
            .args(&args)
            .arg("k")
            .assert()
            .code(2)
            .get_output()
            .clone();
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    // With --pool the two-pool file works.
    shardring()
        .arg("lookup")
        .arg("--config")
        .arg(&two_pools)
        .args(["--pool", "q", "k"])
        .assert()
        .success()
        .stdout("k\tnamed\n");
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "shardring-cli-compat-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn ring_prints_a_compat_continuum_and_its_migration_plan() {
    // The continuum is the library's, point for point.
    let out = shardring()
        .args([
            "ring",
            "--compat",
            "libmemcached-weighted",
            "--nodes",
            "10.0.0.1:11211,10.0.0.2:11211=2",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let ring = shardring::compat::libmemcached::LibmemcachedBuilder::new(
        shardring::compat::libmemcached::LibmemcachedMode::KetamaWeighted,
    )
    .server("10.0.0.1", 11211, 1)
    .server("10.0.0.2", 11211, 2)
    .build()
    .unwrap();
    let want: String = ring
        .points()
        .map(|(p, n)| format!("{p}\t{}\n", n.name()))
        .collect();
    assert_eq!(String::from_utf8(out).unwrap(), want);

    // Under twemproxy, weights are shares of the total: adding a server moves ranges between the
    // servers that stayed, and the plan shows it.
    let plan = shardring()
        .args([
            "ring",
            "--compat",
            "twemproxy",
            "--nodes",
            "10.0.0.1:11211=1,10.0.0.2:11211=3",
            "--diff",
            "--to-nodes",
            "10.0.0.1:11211=1,10.0.0.2:11211=3,10.0.0.3:11211=1",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let plan = String::from_utf8(plan).unwrap();
    assert!(plan.lines().any(|l| l.ends_with("\t10.0.0.3:11211")));
    assert!(
        plan.lines()
            .any(|l| !l.ends_with("\t10.0.0.3:11211") && l.split('\t').nth(2) != Some("-")),
        "{plan}"
    );
}
