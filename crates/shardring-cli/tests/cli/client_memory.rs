//! Memory per idle client of `shardring proxy`: 2000 clients connect and say nothing, and the proxy's
//! resident memory may grow by at most 2 KB a client (the target is 1 KB; twemproxy's users run tens
//! of thousands of idle clients). Then each client's first request after the idle period is answered
//! correctly. memcached and Redis pools, with one and two workers. Not a benchmark:
//! `scripts/bench-client-memory` measures the figures (BENCHMARKS.md).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Kill;
use test_support::{free_port, wait_listening, Memcached, RedisServer, TempDir};

const CLIENTS: usize = 2000;

/// The budget per idle client, in bytes.
const MAX_BYTES_PER_IDLE_CLIENT: u64 = 2048;

/// The resident memory of process `pid`, in bytes (`VmRSS`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"));
    kib * 1024
}

/// The resident memory once it has stopped moving for a tenth of a second (or after 5 s).
fn settled_rss(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = rss(pid);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = rss(pid);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// The pool's client connections, from twemproxy's stats JSON on the stats port.
fn client_connections(stats_addr: &str) -> u64 {
    let mut s = TcpStream::connect(stats_addr).unwrap();
    let mut json = String::new();
    s.read_to_string(&mut json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["alpha"]["client_connections"].as_u64().unwrap_or(0)
}

/// Reads until `got` ends with `end` (or 10 s pass).
fn read_until(stream: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(end) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// Starts the proxy over `server` (`redis` for a Redis pool) with `workers` workers, has 2000 clients
/// connect and idle, checks the memory they cost, then their first requests.
fn idle_clients_cost_little(server: &str, redis: bool, workers: usize) {
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    let need = CLIENTS as u64 + 200;
    if soft < need {
        rlimit::setrlimit(rlimit::Resource::NOFILE, hard.max(need).min(hard), hard).unwrap();
    }
    let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    assert!(
        soft >= need,
        "the test needs {need} descriptors; the hard limit here is {hard}"
    );
    let listen = free_port();
    let redis_line = if redis { "  redis: true\n" } else { "" };
    let config = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  backlog: 4096\n{redis_line}  servers:\n   - {server}:1\n"
    );
    let dir = TempDir::new("cli-client-memory");
    let config_path = dir.path().join("proxy.yml");
    std::fs::write(&config_path, config).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("shardring");
    let stats_addr = format!("127.0.0.1:{}", free_port());
    let proxy = Kill(
        Command::new(&bin)
            .args(["proxy", "--threads", &workers.to_string()])
            .args(["--stats-addr", "127.0.0.1", "--stats-port"])
            .arg(stats_addr.rsplit(':').next().unwrap())
            .arg("--config")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = proxy.0.id();
    let addr = format!("127.0.0.1:{listen}");
    wait_listening(&addr);
    wait_listening(&stats_addr);

    let (set, stored, get, value): (&[u8], &[u8], &[u8], &[u8]) = if redis {
        (
            b"*3\r\n$3\r\nSET\r\n$8\r\nidle-key\r\n$2\r\nv1\r\n",
            b"+OK\r\n",
            b"*2\r\n$3\r\nGET\r\n$8\r\nidle-key\r\n",
            b"$2\r\nv1\r\n",
        )
    } else {
        (
            b"set idle-key 0 0 2\r\nv1\r\n",
            b"STORED\r\n",
            b"get idle-key\r\n",
            b"VALUE idle-key 0 2\r\nv1\r\nEND\r\n",
        )
    };
    // One client first: the server connections, the stats and the allocator's first pages are the
    // proxy's fixed cost, not the idle clients'.
    let mut first = TcpStream::connect(&addr).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    first.write_all(set).unwrap();
    assert_eq!(read_until(&mut first, stored), stored);
    first.write_all(get).unwrap();
    assert_eq!(read_until(&mut first, value), value);

    let before = settled_rss(pid);
    let mut clients: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // Every client accepted: the proxy's count of client connections says so.
    let deadline = Instant::now() + Duration::from_secs(20);
    while client_connections(&stats_addr) < CLIENTS as u64 + 1 {
        assert!(
            Instant::now() < deadline,
            "the proxy did not accept every client"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let idle = settled_rss(pid);
    let per_client = idle.saturating_sub(before) / CLIENTS as u64;
    assert!(
        per_client <= MAX_BYTES_PER_IDLE_CLIENT,
        "{CLIENTS} idle clients cost {per_client} bytes each ({before} → {idle} bytes resident; \
         {workers} worker(s), {})",
        if redis { "redis" } else { "memcached" }
    );

    // After the idle period, each client's first request: all sent, then every answer read.
    std::thread::sleep(Duration::from_secs(1));
    for c in &mut clients {
        c.write_all(get).unwrap();
    }
    for (i, c) in clients.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&read_until(c, value)),
            String::from_utf8_lossy(value),
            "client {i}'s first request"
        );
    }
}

#[test]
fn idle_memcached_clients_cost_under_2_kb_each_with_one_worker() {
    let memcached = Memcached::start();
    idle_clients_cost_little(&format!("127.0.0.1:{}", memcached.port), false, 1);
}

#[test]
fn idle_memcached_clients_cost_under_2_kb_each_with_two_workers() {
    let memcached = Memcached::start();
    idle_clients_cost_little(&format!("127.0.0.1:{}", memcached.port), false, 2);
}

#[test]
fn idle_redis_clients_cost_under_2_kb_each_with_one_worker() {
    let Some(redis) = RedisServer::start(&[]) else {
        return;
    };
    idle_clients_cost_little(&redis.addr, true, 1);
}

#[test]
fn idle_redis_clients_cost_under_2_kb_each_with_two_workers() {
    let Some(redis) = RedisServer::start(&[]) else {
        return;
    };
    idle_clients_cost_little(&redis.addr, true, 2);
}
