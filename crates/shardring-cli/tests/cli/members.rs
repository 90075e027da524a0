//! `shardring members` against a real etcd: publish a YAML pool, list, add / re-weight / remove with
//! their migration plans, watch, and the placement of a published pool equal to the file's.

use std::io::{BufRead, BufReader};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use crate::support::shardring;
use test_support::{etcd_available, Etcd};

fn yaml(dir_tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "shardring-cli-members-{}-{dir_tag}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nutcracker.yml");
    std::fs::write(
        &path,
        "alpha:\n  listen: 127.0.0.1:22122\n  hash: fnv1a_64\n  distribution: ketama\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1\n   - 10.0.0.3:11211:2 cache-c\n",
    )
    .unwrap();
    path
}

fn stdout(args: &[&str]) -> String {
    let out = shardring().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn publish_list_change_and_watch_a_pool() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let url = etcd.url();
    let file = yaml("a");
    let file = file.to_str().unwrap();
    let e = ["members", "--etcd", url.as_str()];
    let with =
        |rest: &[&str]| -> Vec<String> { e.iter().chain(rest).map(|s| s.to_string()).collect() };
    let run = |rest: &[&str]| {
        let args = with(rest);
        stdout(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // A dry run writes nothing: the pool does not exist yet, and listing it says so.
    run(&["-c", file, "publish", "--dry-run"]);
    let fails = |rest: &[&str]| {
        let out = shardring().args(with(rest)).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{rest:?}");
        assert!(out.stdout.is_empty());
        String::from_utf8(out.stderr).unwrap()
    };
    let err = fails(&["--pool", "alpha", "list"]);
    assert!(
        err.contains("etcd has no pool \"alpha\" under /shardring/ (pools there: none)"),
        "{err}"
    );
    let plan = run(&["-c", file, "publish"]);
    assert!(plan.contains("+cache-c"), "{plan}");
    assert_eq!(
        run(&["--pool", "alpha", "list"]),
        "127.0.0.1:11211\t127.0.0.1:11211\t1\n127.0.0.1:11212\t127.0.0.1:11212\t1\ncache-c\t10.0.0.3:11211\t2\n"
    );

    // The published pool places every key where the file does (`shardring lookup --config`).
    let keys: Vec<String> = (0..300).map(|i| format!("user:{i}")).collect();
    let mut lookup = vec!["lookup", "--config", file];
    lookup.extend(keys.iter().map(String::as_str));
    let from_file = stdout(&lookup);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let members = rt.block_on(async {
        shardring_etcd::EtcdSource::builder(&[url.as_str()], "alpha")
            .build()
            .read()
            .await
            .unwrap()
            .snapshot
    });
    let ring = shardring_etcd::twemproxy_ketama(
        members.members(),
        shardring::hash::TwemproxyHash::Fnv1a64,
        None,
    )
    .unwrap();
    for (line, key) in from_file.lines().zip(&keys) {
        assert_eq!(line, format!("{key}\t{}", ring.lookup(key).unwrap().name()));
    }

    // A watcher sees the next two changes with the keys they move.
    let mut watcher = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args(with(&["--pool", "alpha", "watch", "--count", "2"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watcher.stdout.take().unwrap()).lines();
    // The first snapshot: the header and three servers.
    for _ in 0..4 {
        lines.next().unwrap().unwrap();
    }

    let added = run(&["--pool", "alpha", "add", "127.0.0.1:11213:1"]);
    assert!(
        added.starts_with("# planned on the pool at revision"),
        "{added}"
    );
    assert!(added.contains("+127.0.0.1:11213"), "{added}");
    // Adding a server moves keys mostly to it. (Not only: nutcracker gives each server
    // floor(w/W x 40 x n) x 4 points, so with unequal weights a new server shifts the others' counts.)
    let pct = |l: &str| -> f64 {
        l.rsplit('\t')
            .next()
            .unwrap()
            .trim_end_matches('%')
            .parse()
            .unwrap()
    };
    let to_new: f64 = added
        .lines()
        .skip(1)
        .filter(|l| l.split('\t').nth(1) == Some("127.0.0.1:11213"))
        .map(pct)
        .sum();
    let all: f64 = added.lines().skip(1).map(pct).sum();
    assert!(to_new > 0.6 * all && to_new > 15.0, "{added}");
    let reweighted = run(&["--pool", "alpha", "weight", "cache-c", "1"]);
    assert!(reweighted.contains("~cache-c"), "{reweighted}");
    // A misspelt pool and a second server on one address are refused, and nothing is written.
    for action in [
        &["--pool", "alpah", "list"][..],
        &["--pool", "alpah", "add", "127.0.0.1:11214"],
        &["--pool", "alpah", "weight", "cache-c", "2"],
        &["--pool", "alpah", "remove", "cache-c"],
    ] {
        let err = fails(action);
        assert!(
            err.contains("etcd has no pool \"alpah\" under /shardring/ (pools there: alpha)"),
            "{action:?}: {err}"
        );
    }
    let err = fails(&[
        "--pool",
        "alpha",
        "add",
        "10.0.0.3:11211",
        "--name",
        "cache-d",
    ]);
    assert!(
        err.contains("server cache-c already has the address 10.0.0.3:11211"),
        "{err}"
    );
    // --etcd-prefix without its trailing slash means the same prefix.
    let listed = run(&["--pool", "alpha", "list"]);
    let e2 = [
        "members",
        "--etcd",
        url.as_str(),
        "--etcd-prefix",
        "/shardring",
    ];
    assert_eq!(
        stdout(&[&e2[..], &["--pool", "alpha", "list"]].concat()),
        listed
    );

    let watched: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(watcher.wait().unwrap().success());
    let headers: Vec<&String> = watched
        .iter()
        .filter(|l| l.starts_with("# revision"))
        .collect();
    assert_eq!(headers.len(), 2, "{watched:?}");
    assert!(headers[0].contains("+127.0.0.1:11213"));
    assert!(headers[1].contains("~cache-c"));

    let removed = run(&["--pool", "alpha", "remove", "127.0.0.1:11213", "--ranges"]);
    // With --ranges, every line is FROM_POINT TO_POINT OLD NEW, and the removed server's ranges are there.
    assert!(
        removed.lines().skip(1).all(|l| l.split('\t').count() == 4),
        "{removed}"
    );
    assert!(removed
        .lines()
        .skip(1)
        .any(|l| l.split('\t').nth(2) == Some("127.0.0.1:11213")));
    let out = shardring()
        .args(with(&["--pool", "alpha", "remove", "nosuch"]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no server \"nosuch\""));
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn an_unreachable_etcd_is_exit_2_with_the_address() {
    let port = test_support::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = shardring()
        .args(["members", "--etcd", &url, "--pool", "alpha", "list"])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("127.0.0.1:{port}")));
}

#[test]
fn proxy_with_an_unreachable_etcd_is_exit_2_unless_told_to_fall_back() {
    let dir = std::env::temp_dir().join(format!("shardring-cli-members-{}-p", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let listen = test_support::free_port();
    let file = dir.join("p.yml");
    std::fs::write(
        &file,
        format!("alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:11211:1\n"),
    )
    .unwrap();
    let etcd = format!("http://127.0.0.1:{}", test_support::free_port());
    let stats = test_support::free_port().to_string();
    let file = file.to_str().unwrap();
    let out = shardring()
        .args(["proxy", "-c", file, "-s", &stats, "--etcd", &etcd])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read its servers from etcd"), "{err}");
    assert!(err.contains("--etcd-fallback"), "{err}");
    // With --etcd-fallback it serves the file's servers and keeps trying.
    let mut child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args([
            "proxy",
            "-c",
            file,
            "-s",
            &stats,
            "--etcd",
            &etcd,
            "--etcd-fallback",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the proxy listens");
        assert!(child.try_wait().unwrap().is_none(), "the proxy exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past the failed read of etcd (refused at once), it is still running.
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the proxy runs on the file's servers"
    );
    let _ = child.kill();
    let _ = child.wait();
    // --etcd-fallback without --etcd is a usage error.
    let out = shardring()
        .args(["proxy", "-c", file, "--etcd-fallback"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The proxy's log says why it lost etcd (the endpoint and the error in words) and when etcd is back.
#[test]
fn the_proxy_logs_why_it_lost_etcd_and_when_it_is_back() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let file = yaml("lost");
    let listen = test_support::free_port();
    std::fs::write(
        &file,
        format!("alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:11211:1\n"),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    stdout(&["members", "--etcd", &etcd.url(), "-c", file, "publish"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let relay = rt.block_on(test_support::Relay::start(format!(
        "127.0.0.1:{}",
        etcd.url().rsplit(':').next().unwrap()
    )));
    let log = std::path::Path::new(file).with_file_name("proxy.log");
    let mut proxy = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args([
            "proxy",
            "-c",
            file,
            "-s",
            &test_support::free_port().to_string(),
        ])
        .args(["--etcd", &relay.url(), "-o"])
        .arg(&log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wait_for = |text: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = std::fs::read_to_string(&log).unwrap_or_default();
            if got.contains(text) {
                return got;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {text:?} in:\n{got}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for("serving");
    relay.cut();
    let lost = wait_for("etcd membership source lost");
    let line = lost
        .lines()
        .find(|l| l.contains("etcd membership source lost"))
        .unwrap();
    assert!(line.contains(&relay.url()), "{line}");
    assert!(
        line.contains("ended: ") || line.contains("failed: "),
        "the cause, in words: {line}"
    );
    assert!(!line.contains("tonic::"), "{line}");
    relay.restore();
    wait_for("etcd membership source reachable again");
    let _ = proxy.kill();
    let _ = proxy.wait();
    let _ = std::fs::remove_dir_all(std::path::Path::new(file).parent().unwrap());
}
