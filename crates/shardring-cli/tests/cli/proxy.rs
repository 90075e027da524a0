//! `shardring proxy`: config errors and --test-conf, then the real binary over a real memcached: serving,
//! stats JSON, /metrics, SIGHUP with a bad file (refused, old kept), SIGTERM (drain, exit 0).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use crate::support::{shardring, signal, Kill};
use predicates::prelude::*;
use test_support::{free_port, wait_listening, Memcached};

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "shardring-cli-proxy-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_bad_config_lists_every_problem_and_exits_2() {
    let path = temp_file(
        "bad.yml",
        "alpha:\n  listen: 127.0.0.1:22121\n  hash: sha1\n  colour: blue\n",
    );
    shardring()
        .args(["proxy", "--config"])
        .arg(&path)
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("line 3").and(predicate::str::contains("line 4")));
}

#[test]
fn redis_pools_are_accepted() {
    let path = temp_file(
        "redis.yml",
        "alpha:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_auth: pw\n  redis_db: 1\n  servers:\n   - 127.0.0.1:6379:1\n",
    );
    shardring()
        .args(["proxy", "--test-conf", "--config"])
        .arg(&path)
        .assert()
        .success();
}

#[test]
fn test_conf_accepts_a_good_file() {
    let path = temp_file(
        "good.yml",
        "alpha:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n",
    );
    shardring()
        .args(["proxy", "-t", "-c"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("syntax is ok"));
}

fn roundtrip(stream: &mut TcpStream, req: &[u8], expect: &[u8]) {
    stream.write_all(req).unwrap();
    let mut got = vec![0u8; expect.len()];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expect)
    );
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // It reads to EOF, so it asks for the close that HTTP/1.1 keep-alive would otherwise leave to the
    // server's idle timeout.
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn the_binary_serves_reports_reloads_and_drains() {
    serves_reports_reloads_and_drains(&[]);
}

#[test]
fn on_one_thread_too() {
    serves_reports_reloads_and_drains(&["--threads", "1"]);
}

#[test]
fn on_three_workers_too() {
    serves_reports_reloads_and_drains(&["--threads", "3"]);
}

fn serves_reports_reloads_and_drains(extra_args: &[&str]) {
    let mc_port = free_port();
    let _memcached = Memcached::start_on(mc_port);
    let (listen, stats, metrics) = (free_port(), free_port(), free_port());
    let good = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:{mc_port}:1 one\n"
    );
    let path = temp_file("proxy.yml", &good);
    let bin = assert_cmd::cargo::cargo_bin("shardring");
    let mut proxy = Kill(
        StdCommand::new(bin)
            .args([
                "proxy",
                "--stats-port",
                &stats.to_string(),
                "--metrics-addr",
            ])
            .arg(format!("127.0.0.1:{metrics}"))
            .args(extra_args)
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let addr = format!("127.0.0.1:{listen}");
    wait_listening(&addr);
    wait_listening(&format!("127.0.0.1:{stats}"));
    let mut c = TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    roundtrip(&mut c, b"set k 0 0 2\r\nhi\r\n", b"STORED\r\n");
    roundtrip(&mut c, b"get k\r\n", b"VALUE k 0 2\r\nhi\r\nEND\r\n");

    // twemproxy's stats JSON.
    let mut s = TcpStream::connect(format!("127.0.0.1:{stats}")).unwrap();
    let mut json = String::new();
    s.read_to_string(&mut json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["alpha"]["one"]["requests"], 2, "{json}");
    assert_eq!(v["alpha"]["client_connections"], 1);

    // Prometheus.
    let text = http_get(&format!("127.0.0.1:{metrics}"), "/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text
        .contains("shardring_proxy_server_latency_seconds_count{pool=\"alpha\",server=\"one\"} 2"));
    assert!(http_get(&format!("127.0.0.1:{metrics}"), "/").starts_with("HTTP/1.1 404"));

    // SIGHUP with a broken file: refused, the proxy keeps serving.
    std::fs::write(&path, "alpha:\n  listen: 127.0.0.1:1\n  bogus: 1\n").unwrap();
    let pid = proxy.0.id().to_string();
    signal("-HUP", &pid);
    std::thread::sleep(Duration::from_millis(300));
    roundtrip(&mut c, b"get k\r\n", b"VALUE k 0 2\r\nhi\r\nEND\r\n");

    // SIGHUP with a good file naming another server: every client, on whichever worker, now reaches
    // that server only.
    let mc2_port = free_port();
    let _memcached2 = Memcached::start_on(mc2_port);
    std::fs::write(
        &path,
        format!(
            "alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:{mc2_port}:1 two\n"
        ),
    )
    .unwrap();
    let mut clients: Vec<TcpStream> = (0..3)
        .map(|_| {
            let s = TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    signal("-HUP", &pid);
    std::thread::sleep(Duration::from_millis(500));
    roundtrip(&mut c, b"get k\r\n", b"END\r\n");
    for (i, cl) in clients.iter_mut().enumerate() {
        roundtrip(cl, b"get k\r\n", b"END\r\n");
        roundtrip(
            cl,
            format!("set moved{i} 0 0 1\r\nm\r\n").as_bytes(),
            b"STORED\r\n",
        );
    }
    let mut direct = TcpStream::connect(format!("127.0.0.1:{mc2_port}")).unwrap();
    direct
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for i in 0..clients.len() {
        roundtrip(
            &mut direct,
            format!("get moved{i}\r\n").as_bytes(),
            format!("VALUE moved{i} 0 1\r\nm\r\nEND\r\n").as_bytes(),
        );
    }
    drop(clients);

    // SIGTERM: the open client is answered, then closed; exit 0.
    signal("-TERM", &pid);
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = proxy.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let mut log = String::new();
    proxy
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains("reload refused"), "{log}");
    assert!(log.contains("shutting down"), "{log}");
}

/// Starts the binary on `config` with `flags`; returns it and its client address.
fn start_proxy(config: &str, listen: u16, flags: &[&str]) -> (Kill, String) {
    let path = temp_file("flags.yml", config);
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args(["proxy", "--stats-port", &free_port().to_string()])
        .args(flags)
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{listen}");
    wait_listening(&addr);
    (Kill(child), addr)
}

#[test]
fn max_value_size_sets_the_value_limit() {
    let mc = free_port();
    let _memcached = Memcached::start_on(mc);
    let listen = free_port();
    let config =
        format!("alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:{mc}:1\n");
    let (_proxy, addr) = start_proxy(&config, listen, &["--max-value-size", "1k"]);
    let mut c = TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let at_limit = format!("set k 0 0 1024\r\n{}\r\n", "v".repeat(1024));
    roundtrip(&mut c, at_limit.as_bytes(), b"STORED\r\n");
    let over = format!("set k 0 0 1025\r\n{}\r\nget nothing\r\n", "v".repeat(1025));
    roundtrip(
        &mut c,
        over.as_bytes(),
        b"SERVER_ERROR object too large for cache\r\nEND\r\n",
    );
    for flag in ["--max-value-size", "--max-request-size"] {
        for bad in ["0", "2g", "lots", "1025m", "1t"] {
            shardring()
                .args(["proxy", "-t", flag, bad, "-c"])
                .arg(temp_file("t.yml", &config))
                .assert()
                .code(2)
                .stderr(predicate::str::contains(flag));
        }
        for good in ["1", "64k", "1g", "1024M"] {
            shardring()
                .args(["proxy", "-t", flag, good, "-c"])
                .arg(temp_file("t.yml", &config))
                .assert()
                .success();
        }
    }
}

#[test]
fn test_conf_checks_the_flags_with_the_file() {
    let config = "mc:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:2:1\n   - 127.0.0.1:3:1\n\
                  rd:\n  listen: 127.0.0.1:4\n  redis: true\n  servers:\n   - 127.0.0.1:5:1\n";
    let file = temp_file("flags.yml", config);
    for (flags, problem) in [
        (
            &["--replicas", "5"][..],
            "mc: replicas must be between 1 and the number of servers (2), not 5",
        ),
        // A redis pool takes a count that names it, checked like a memcached pool's.
        (
            &["--replicas", "rd=2"],
            "rd: replicas must be between 1 and the number of servers (1), not 2",
        ),
        (
            &["--replicas", "nope=2"],
            "--replicas names no pool of the file: \"nope\"",
        ),
    ] {
        shardring()
            .args(["proxy", "-t", "-c"])
            .arg(&file)
            .args(flags)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(problem));
    }
    // Given for every pool, a memcached remedy leaves the redis pool alone, and says so; hot keys
    // are both protocols'.
    shardring()
        .args(["proxy", "-t", "-c"])
        .arg(&file)
        .args([
            "--replicas",
            "2",
            "--warmup-window",
            "100",
            "--hot-keys",
            "10",
        ])
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "--replicas, --warmup-window apply to memcached pools only, not to redis pool \"rd\"",
        ));
}

#[test]
fn multiget_all_or_nothing_fails_a_multi_get_whole() {
    let mc = free_port();
    let _memcached = Memcached::start_on(mc);
    // A second server that is never up: its keys fail.
    let dead = free_port();
    // Keys that differ from their first byte: the default hash (twemproxy's fnv1a_64) sends keys that
    // differ only in their last byte to nearby points, often all to one server.
    let keys: Vec<String> = (0..200u64)
        .map(|i| format!("{:x}:item", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .collect();
    let get = format!("get {}\r\n", keys.join(" "));
    for (flags, whole) in [(&[][..], false), (&["--multiget-all-or-nothing"][..], true)] {
        let listen = free_port();
        let config = format!(
            "alpha:\n  listen: 127.0.0.1:{listen}\n  timeout: 500\n  servers:\n   - 127.0.0.1:{mc}:1\n   - 127.0.0.1:{dead}:1\n"
        );
        let (_proxy, addr) = start_proxy(&config, listen, flags);
        let mut c = TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for k in &keys {
            // Keys on the dead server fail; that is expected here.
            c.write_all(format!("set {k} 0 0 1\r\nx\r\n").as_bytes())
                .unwrap();
            let mut line = Vec::new();
            let mut byte = [0u8];
            while !line.ends_with(b"\r\n") {
                c.read_exact(&mut byte).unwrap();
                line.push(byte[0]);
            }
        }
        c.write_all(get.as_bytes()).unwrap();
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        while !(reply.ends_with(b"END\r\n")
            || reply.starts_with(b"SERVER_ERROR") && reply.ends_with(b"\r\n"))
        {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "closed");
            reply.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&reply);
        if whole {
            assert!(text.starts_with("SERVER_ERROR"), "{text}");
        } else {
            let values = text.matches("VALUE ").count();
            assert!(values > 0 && values < keys.len(), "partial: {text}");
        }
    }
}
