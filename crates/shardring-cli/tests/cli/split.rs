//! `shardring split` over real proxies and memcached servers: a key added goes through `write` to
//! `read` with both proxies confirming, its reads then spread over its copies; a proxy that does not
//! reload stops the run with the key left in `write`; `remove` merges it back; `auto` splits the
//! key the proxies' hot-key detection ranks hottest.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use crate::support::{shardring, Kill};
use test_support::{free_port, wait_listening, Memcached, TempDir};

/// How many servers hold a split key.
const COPIES: &str = "3";

/// A proxy over `servers` splitting the keys of `keys`, with hot-key detection and metrics.
struct Proxy {
    listen: u16,
    stats: u16,
    metrics: u16,
    process: Kill,
}

fn start_proxy(dir: &Path, n: usize, servers: &[Memcached], keys: &Path) -> Proxy {
    let (listen, stats, metrics) = (free_port(), free_port(), free_port());
    let mut yaml = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  hash: fnv1a_64\n  distribution: ketama\n  servers:\n"
    );
    for s in servers {
        yaml.push_str(&format!("   - {}:1\n", s.addr));
    }
    let file = dir.join(format!("proxy{n}.yml"));
    std::fs::write(&file, yaml).unwrap();
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args(["proxy", "-s", &stats.to_string(), "-c"])
        .arg(&file)
        .args([
            "--hot-keys",
            "20",
            "--hot-key-split",
            COPIES,
            "--hot-key-split-keys",
        ])
        .arg(keys)
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let process = Kill(child);
    for port in [listen, stats, metrics] {
        wait_listening(&format!("127.0.0.1:{port}"));
    }
    Proxy {
        listen,
        stats,
        metrics,
        process,
    }
}

/// One request and its reply line(s) up to `end`, over a fresh connection.
fn ask(addr: &str, req: &[u8], end: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(end) {
        assert_eq!(
            s.read(&mut b).unwrap(),
            1,
            "{:?}",
            String::from_utf8_lossy(&out)
        );
        out.push(b[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn set(addr: &str, key: &str, value: &str) {
    let req = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
    assert_eq!(ask(addr, req.as_bytes(), b"\r\n"), "STORED\r\n");
}

fn get(addr: &str, key: &str) -> String {
    ask(addr, format!("get {key}\r\n").as_bytes(), b"END\r\n")
}

/// How many of `servers` hold `key`.
fn holders(servers: &[Memcached], key: &str) -> usize {
    servers
        .iter()
        .filter(|s| get(&s.addr, key).starts_with("VALUE"))
        .count()
}

/// `shardring split` over `proxies` (their stats ports), reloading `reload` (pids).
fn split(
    keys: &Path,
    proxies: &[&Proxy],
    reload: &[&Proxy],
    action: &[&str],
) -> assert_cmd::assert::Assert {
    let stats: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.stats))
        .collect();
    let pids: Vec<String> = reload
        .iter()
        .map(|p| p.process.0.id().to_string())
        .collect();
    shardring()
        .arg("split")
        .arg("--keys")
        .arg(keys)
        .arg("-c")
        .arg(keys.with_file_name("proxy0.yml"))
        .args([
            "--copies",
            COPIES,
            "--pool",
            "alpha",
            "--proxies",
            &stats.join(","),
        ])
        .args(["--reload-command", &format!("kill -HUP {}", pids.join(" "))])
        .args(["--confirm-timeout", "5"])
        .args(action)
        .timeout(Duration::from_secs(60))
        .assert()
}

fn lines(path: &PathBuf) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn keys_are_split_through_both_phases_merged_back_and_followed_from_the_hot_key_ranking() {
    let dir = TempDir::new("split");
    let servers: Vec<Memcached> = (0..5).map(|_| Memcached::start()).collect();
    let keys = dir.path().join("split-keys");
    std::fs::write(&keys, "").unwrap();
    let a = start_proxy(dir.path(), 0, &servers, &keys);
    let b = start_proxy(dir.path(), 1, &servers, &keys);
    let (addr_a, addr_b) = (
        format!("127.0.0.1:{}", a.listen),
        format!("127.0.0.1:{}", b.listen),
    );
    set(&addr_a, "hot:1", "one");
    split(&keys, &[&a, &b], &[&a, &b], &["add", "hot:1"])
        .success()
        .stdout(predicates::str::contains("split hot:1 over 3 servers"));
    assert_eq!(lines(&keys), ["read hot:1 3"]);
    for _ in 0..6 {
        for addr in [&addr_a, &addr_b] {
            assert_eq!(get(addr, "hot:1"), "VALUE hot:1 0 3\r\none\r\nEND\r\n");
        }
    }
    assert_eq!(holders(&servers, "hot:1"), 3, "the owner and two copies");
    // A write through one proxy, read through the other from every server in turn.
    set(&addr_b, "hot:1", "two");
    for _ in 0..6 {
        assert_eq!(get(&addr_a, "hot:1"), "VALUE hot:1 0 3\r\ntwo\r\nEND\r\n");
    }

    // A third proxy the reload command does not reach: the run stops with the key in `write`.
    let c = start_proxy(dir.path(), 2, &servers, &keys);
    let out = split(&keys, &[&a, &b, &c], &[&a, &b], &["add", "hot:2"]).code(2);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("1 of 3 proxies do not serve")
            && stderr.contains(&format!("127.0.0.1:{}", c.stats)),
        "{stderr}"
    );
    assert_eq!(lines(&keys), ["read hot:1 3", "write hot:2 3"]);
    // Reloaded, a rerun goes on to `read`.
    split(&keys, &[&a, &b, &c], &[&a, &b, &c], &["add", "hot:2"]).success();
    assert_eq!(lines(&keys), ["read hot:1 3", "read hot:2 3"]);

    split(&keys, &[&a, &b, &c], &[&a, &b, &c], &["remove", "hot:1"])
        .success()
        .stdout(predicates::str::contains("merged hot:1 back"));
    assert_eq!(lines(&keys), ["read hot:2 3"]);
    // Merged back, its copies are deleted (`-c`): the owner alone holds it.
    assert_eq!(holders(&servers, "hot:1"), 1);
    assert_eq!(get(&addr_a, "hot:1"), "VALUE hot:1 0 3\r\ntwo\r\nEND\r\n");

    // A key's servers change through `write` over the larger number.
    split(
        &keys,
        &[&a, &b, &c],
        &[&a, &b, &c],
        &["add", "hot:2", "--copies-each", "5"],
    )
    .success();
    assert_eq!(lines(&keys), ["read hot:2 5"]);

    // The hot-key ranking under a load: hot:9 takes most reads, 100 other keys the rest.
    set(&addr_a, "hot:9", "nine");
    for i in 0..100 {
        set(&addr_a, &format!("cold:{i}"), "c");
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loads: Vec<_> = [addr_a.clone(), addr_b.clone()]
        .into_iter()
        .map(|addr| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    get(&addr, "hot:9");
                    get(&addr, &format!("cold:{}", i % 100));
                    get(&addr, "hot:9");
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let metrics: Vec<String> = [&a, &b, &c]
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.metrics))
        .collect();
    let auto = split(
        &keys,
        &[&a, &b, &c],
        &[&a, &b, &c],
        &["auto", "--hot-keys-from", &metrics.join(","), "--once"],
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in loads {
        l.join().unwrap();
    }
    auto.success()
        .stdout(predicates::str::contains("split hot:9 over 5 servers"));
    // hot:9 over every server (it takes two thirds of the reads); the cold keys are not split,
    // and hot:2, no longer read, is merged back.
    assert_eq!(lines(&keys), ["read hot:9 5"]);
}
