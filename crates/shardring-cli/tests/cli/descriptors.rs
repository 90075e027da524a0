//! `shardring proxy` short of file descriptors: run under `ulimit -n 128` with three real memcached
//! servers, 300 idle clients take every descriptor the proxy has. No healthy server may be ejected for
//! it, the proxy logs the cause, a request that needs a new server connection gets a server error,
//! and once the clients leave, new clients are served again.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Kill;
use test_support::{free_port, wait_listening, Memcached, TempDir};

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `req` and reads one reply line (or, for a hit, the `VALUE` line, the data and `END`).
fn ask(stream: &mut TcpStream, req: &[u8]) -> String {
    stream.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8];
    while let Ok(1) = stream.read(&mut byte) {
        got.push(byte[0]);
        let ended =
            got.ends_with(b"\r\n") && (!got.starts_with(b"VALUE ") || got.ends_with(b"END\r\n"));
        if ended {
            break;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// twemproxy's stats JSON from the proxy's stats port.
fn stats(addr: &str) -> serde_json::Value {
    let mut s = connect(addr);
    let mut json = String::new();
    s.read_to_string(&mut json).unwrap();
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json:?}"))
}

/// Waits until the proxy's log at `path` contains `needle`.
fn wait_for_log(path: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(needle) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "the log never said {needle:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn running_out_of_descriptors_ejects_no_server_and_the_proxy_recovers_when_clients_leave() {
    let memcacheds = [Memcached::start(), Memcached::start(), Memcached::start()];
    let ports = memcacheds.each_ref().map(|m| m.port);
    let (listen, stats_port) = (free_port(), free_port());
    let servers: String = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("   - 127.0.0.1:{p}:1 mc{i}\n"))
        .collect();
    // Ejection on: before descriptor shortages were told from server failures, two failed probes
    // (a tenth of a second apart) ejected every server.
    let config = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  backlog: 1024\n  timeout: 1000\n  \
         auto_eject_hosts: true\n  server_failure_limit: 2\n  server_retry_timeout: 60000\n  \
         server_connections: 2\n  servers:\n{servers}"
    );
    let dir = TempDir::new("cli-descriptors");
    let config_path = dir.path().join("proxy.yml");
    std::fs::write(&config_path, config).unwrap();
    let log_path = dir.path().join("proxy.log");
    let bin = assert_cmd::cargo::cargo_bin("shardring");
    // `ulimit -n` sets the hard limit too, so the proxy cannot raise itself past 128.
    let _proxy = Kill(
        Command::new("bash")
            .arg("-c")
            .arg(r#"ulimit -n 128 && exec "$0" "$@""#)
            .arg(&bin)
            .args(["proxy", "--threads", "1", "--health-check-interval", "100"])
            .args(["--stats-port", &stats_port.to_string(), "--config"])
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let addr = format!("127.0.0.1:{listen}");
    let stats_addr = format!("127.0.0.1:{stats_port}");
    wait_listening(&addr);
    wait_listening(&stats_addr);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("the descriptor limit is below what the configuration may open")
            && log.contains("limit=128"),
        "no warning at start:\n{log}"
    );

    // One client stores keys on every server first: its connections to them (the first of each
    // server's two) are open before the descriptors run out.
    // Keys that differ from their first byte: the default hash sends keys that differ only in their
    // last bytes to nearby points, often to one server.
    let keys: Vec<String> = (1..=60u64)
        .map(|i| format!("{:x}:item", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .collect();
    let mut first = connect(&addr);
    for k in &keys {
        assert_eq!(
            ask(&mut first, format!("set {k} 0 0 2\r\nok\r\n").as_bytes()),
            "STORED\r\n"
        );
    }
    let per_server: Vec<u64> = {
        let v = stats(&stats_addr);
        (0..3)
            .map(|i| v["alpha"][format!("mc{i}")]["requests"].as_u64().unwrap())
            .collect()
    };
    assert!(per_server.iter().all(|&n| n > 0), "{per_server:?}");

    // 300 idle clients: the proxy accepts until it has no descriptor left; the rest wait in the
    // listen queue.
    let mut idle: Vec<TcpStream> = (0..300).map(|_| connect(&addr)).collect();
    let log = wait_for_log(&log_path, "out of file descriptors");
    assert!(log.contains("Too many open files"), "{log}");

    // While short: the first client's keys still read back (an ejected server's keys would move to
    // another server and miss), through twenty health rounds. (Health probes get a descriptor now and
    // then, when one is freed before the accept loop takes it, so the old code took a second or more
    // to eject every server.)
    let short_since = Instant::now();
    while short_since.elapsed() < Duration::from_secs(2) {
        for k in keys.iter().step_by(7) {
            assert_eq!(
                ask(&mut first, format!("get {k}\r\n").as_bytes()),
                format!("VALUE {k} 0 2\r\nok\r\nEND\r\n"),
                "while short of descriptors"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Of two accepted idle clients (consecutive client ids), one takes the server connection the
    // first client opened, the other the server's second connection (a client's id picks one),
    // which cannot be opened now: a server error naming the cause, not a server's failure.
    let mut replies: Vec<String> = idle[..2]
        .iter_mut()
        .map(|c| ask(c, format!("get {}\r\n", keys[0]).as_bytes()))
        .collect();
    replies.sort();
    assert_eq!(
        replies,
        [
            "SERVER_ERROR proxy out of local resources: Too many open files (os error 24)\r\n"
                .to_owned(),
            format!("VALUE {} 0 2\r\nok\r\nEND\r\n", keys[0]),
        ],
        "requests on an open and on a new server connection"
    );

    // The clients leave: the proxy accepts again, and a new client is served on every server.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut again = loop {
        if let Ok(mut c) = TcpStream::connect(&addr) {
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            if ask(&mut c, b"set fresh 0 0 3\r\nnew\r\n") == "STORED\r\n" {
                break c;
            }
        }
        assert!(Instant::now() < deadline, "the proxy did not recover");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        ask(&mut again, b"get fresh\r\n"),
        "VALUE fresh 0 3\r\nnew\r\nEND\r\n"
    );
    for k in &keys {
        assert_eq!(
            ask(&mut again, format!("get {k}\r\n").as_bytes()),
            format!("VALUE {k} 0 2\r\nok\r\nEND\r\n")
        );
    }
    let v = stats(&stats_addr);
    assert_eq!(v["alpha"]["server_ejects"], 0, "{v}");
    assert!(
        v["alpha"]["descriptor_shortages"].as_u64().unwrap() > 0,
        "{v}"
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains("server ejected"), "{log}");
}
