//! `shardring proxy` reloading under a burst of signals, over real memcached servers: two SIGHUPs a
//! few milliseconds apart with the file changed between them end with the second file served; a file
//! rewritten in place (truncated, then written in small pieces) while SIGHUPs arrive is never served
//! half written, and once the writes end the whole file is served without another signal, even when
//! the write paused long enough for its first half to be taken (`shardring_proxy::signals`'s settle
//! rule).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardring_proxy::signals::{FOLLOW, SETTLE};
use test_support::{free_port, wait_listening, Memcached, TempDir};

/// How long a test waits for the proxy to serve what it should before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// A proxy child on one pool `alpha`, killed on drop.
struct Proxy {
    child: Child,
    listen: u16,
    stats: u16,
    config: PathBuf,
    log: PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// Starts the proxy on `servers` (memcached servers by name) in `dir`; returns once it serves.
    fn start(dir: &Path, servers: &[(&str, &Memcached)]) -> Proxy {
        let listen = free_port();
        let stats = free_port();
        let config = dir.join("nutcracker.yml");
        let log = dir.join("proxy.log");
        std::fs::write(&config, pool_file(listen, servers)).unwrap();
        let child = Command::new(assert_cmd::cargo::cargo_bin("shardring"))
            .args(["proxy", "-s", &stats.to_string(), "-c"])
            .arg(&config)
            .arg("-o")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let proxy = Proxy {
            child,
            listen,
            stats,
            config,
            log,
        };
        wait_listening(&format!("127.0.0.1:{listen}"));
        wait_listening(&format!("127.0.0.1:{stats}"));
        proxy
    }

    /// Sends SIGHUP at once (kill(2), not a kill(1) process: a burst is milliseconds apart).
    fn hup(&self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    }

    /// The servers it serves now.
    fn servers(&self) -> BTreeSet<String> {
        served(self.stats)
    }

    /// Waits until the proxy serves exactly `names`; panics with the log after [`PATIENCE`].
    fn wait_serving(&self, names: &[&str]) {
        let want = set(names);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let now = self.servers();
            if now == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "still serving {now:?}, not {want:?}; log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stores `key` through the proxy.
    fn set(&self, key: &str) {
        let mut c = TcpStream::connect(("127.0.0.1", self.listen)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        roundtrip(
            &mut c,
            format!("set {key} 0 0 1\r\nx\r\n").as_bytes(),
            "STORED\r\n",
        );
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Sends `request` and reads exactly `expect`'s length back, which must be `expect`.
fn roundtrip(c: &mut TcpStream, request: &[u8], expect: &str) {
    c.write_all(request).unwrap();
    let mut got = vec![0; expect.len()];
    c.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expect);
}

/// Whether memcached `server` holds `key` (read directly, not through the proxy).
fn holds(server: &Memcached, key: &str) -> bool {
    let mut c = TcpStream::connect(&server.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0; 256];
    while !reply.ends_with(b"END\r\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "memcached closed the connection");
        reply.extend_from_slice(&buf[..n]);
    }
    reply.starts_with(b"VALUE ")
}

/// A twemproxy file of one pool `alpha` on `listen` with `servers`, and a few settings before them
/// (so that a file cut short has parts that parse and parts that do not). md5: fnv1a_64 (the
/// default) places keys that differ only in their last characters, as these tests' do, mostly on
/// one server.
fn pool_file(listen: u16, servers: &[(&str, &Memcached)]) -> String {
    let mut text = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  hash: md5\n  distribution: ketama\n  \
         timeout: 400\n  servers:\n"
    );
    for (name, server) in servers {
        text.push_str(&format!("   - {} {name}\n", server.server_spec()));
    }
    text
}

#[test]
fn sighups_a_few_milliseconds_apart_end_with_the_last_file_served() {
    let dir = TempDir::new("reload-burst");
    let mcs: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let named = [("a", &mcs[0]), ("b", &mcs[1]), ("c", &mcs[2])];
    let proxy = Proxy::start(dir.path(), &named);
    proxy.wait_serving(&["a", "b", "c"]);
    // Each round: a file of two servers, SIGHUP, the file changed again `gap` later, SIGHUP again.
    // The gaps put the second signal before the first reload has read the file, while it settles,
    // and around the time it takes the first file.
    let gaps_ms = [0, 1, 3, 10, 40, 90, 120];
    for (round, gap) in gaps_ms.into_iter().enumerate() {
        let first = [named[round % 3], named[(round + 1) % 3]];
        let last = named[(round + 2) % 3];
        std::fs::write(&proxy.config, pool_file(proxy.listen, &first)).unwrap();
        proxy.hup();
        std::thread::sleep(Duration::from_millis(gap));
        std::fs::write(&proxy.config, pool_file(proxy.listen, &[last])).unwrap();
        proxy.hup();
        proxy.wait_serving(&[last.0]);
        // By placement too: a key set through the proxy is on the last file's only server.
        let key = format!("burst:{round}");
        proxy.set(&key);
        assert!(holds(last.1, &key), "round {round} (gap {gap} ms)");
    }
    // And it stays so: no reload of an earlier file comes late, for as long as a reload may still
    // read the file after the last signal.
    let until = Instant::now() + SETTLE + FOLLOW + Duration::from_millis(500);
    let last = named[(gaps_ms.len() + 1) % 3].0;
    while Instant::now() < until {
        assert_eq!(proxy.servers(), set(&[last]));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rewrites `path` in place with `text`, as a script or a tool without an atomic rename does:
/// truncates it, then writes it a line at a time, a couple of milliseconds apart, sending SIGHUP
/// through `hup` before each server line but the first, when the file is whole but for its last
/// servers (a half file that parses). The last signal comes before the last line: none after the
/// write ends. Returns the longest time between two writes (the file stays as the first left it).
fn rewrite_in_lines(path: &Path, text: &str, hup: impl Fn()) -> Duration {
    let mut file = std::fs::File::create(path).unwrap();
    let mut last_write = Instant::now();
    let mut longest = Duration::ZERO;
    let mut servers = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("   - ") {
            servers += 1;
            if servers > 1 {
                hup();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
        file.write_all(line.as_bytes()).unwrap();
        let now = Instant::now();
        longest = longest.max(now - last_write);
        last_write = now;
    }
    longest
}

#[test]
fn a_file_rewritten_in_place_during_sighups_is_never_served_half_written() {
    let dir = TempDir::new("reload-in-place");
    let mcs: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let named = [
        ("a", &mcs[0]),
        ("b", &mcs[1]),
        ("c", &mcs[2]),
        ("d", &mcs[3]),
    ];
    // Two whole files, each written over the other: cut after any of its first servers, each
    // parses (a server list cut short), and its settings cut short do not.
    let two = [named[2], named[3]];
    let four = named;
    let proxy = Proxy::start(dir.path(), &two);
    proxy.wait_serving(&["c", "d"]);
    let wholes = [set(&["c", "d"]), set(&["a", "b", "c", "d"])];

    // What the proxy serves, sampled as fast as the stats port answers, until told to stop.
    let seen = Arc::new(Mutex::new(Vec::<BTreeSet<String>>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen, stop, stats) = (Arc::clone(&seen), Arc::clone(&stop), proxy.stats);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now = served(stats);
                {
                    let mut seen = seen.lock().unwrap();
                    if seen.last() != Some(&now) {
                        seen.push(now);
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };

    let mut unsure_rounds = 0;
    for round in 0..6 {
        let (servers, names): (&[(&str, &Memcached)], &[&str]) = if round % 2 == 0 {
            (&four, &["a", "b", "c", "d"])
        } else {
            (&two, &["c", "d"])
        };
        let text = pool_file(proxy.listen, servers);
        let longest = rewrite_in_lines(&proxy.config, &text, || proxy.hup());
        if longest >= SETTLE / 2 {
            // This machine stalled the writer for about the settle time: a half file that stood
            // that long may be taken (and is followed to the end). Only the end is checked.
            unsure_rounds += 1;
            eprintln!("round {round}: the writer stalled {longest:?}; half files not checked");
        }
        // The whole file is served once the write ends, with no signal after it.
        proxy.wait_serving(names);
        if longest < SETTLE / 2 {
            let seen = seen.lock().unwrap();
            let half = seen.iter().find(|s| !wholes.contains(s));
            assert_eq!(
                half,
                None,
                "round {round}: a half-written file was served (seen: {seen:?}); log:\n{}",
                std::fs::read_to_string(&proxy.log).unwrap_or_default()
            );
        }
        seen.lock().unwrap().clear();
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    assert!(
        unsure_rounds < 6,
        "the writer stalled in every round: nothing was checked"
    );
    // And keys are placed on the whole file's servers: of 200 keys set through the proxy, every
    // server of the last file got some.
    let keys: Vec<String> = (0..200).map(|i| format!("in-place:{i}")).collect();
    for k in &keys {
        proxy.set(k);
    }
    for (name, server) in two {
        assert!(keys.iter().any(|k| holds(server, k)), "no key on {name}");
    }
}

#[test]
fn a_write_that_pauses_after_a_sighup_is_followed_to_its_end_without_another() {
    let dir = TempDir::new("reload-follow");
    let mcs: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let named = [
        ("a", &mcs[0]),
        ("b", &mcs[1]),
        ("c", &mcs[2]),
        ("d", &mcs[3]),
    ];
    let proxy = Proxy::start(dir.path(), &[named[3]]);
    proxy.wait_serving(&["d"]);
    let text = pool_file(proxy.listen, &named);
    // Cut after server b: a file that parses.
    let cut = text.find("   - 127.0.0.1").unwrap();
    let cut = cut + text[cut..].find('\n').unwrap() + 1;
    let cut = cut + text[cut..].find('\n').unwrap() + 1;
    let mut file = std::fs::File::create(&proxy.config).unwrap();
    file.write_all(&text.as_bytes()[..cut]).unwrap();
    proxy.hup();
    // The write pauses until the half has been taken (as a write that paused past the settle time
    // is), then ends, and no signal follows.
    proxy.wait_serving(&["a", "b"]);
    file.write_all(&text.as_bytes()[cut..]).unwrap();
    drop(file);
    proxy.wait_serving(&["a", "b", "c", "d"]);
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    assert!(
        log.contains("the configuration files changed after the last reload"),
        "{log}"
    );
    assert_eq!(log.matches("signal=\"SIGHUP\"").count(), 1, "{log}");
}

/// The names of the servers the stats JSON on port `stats` shows in pool `alpha`: the servers the
/// proxy serves now.
fn served(stats: u16) -> BTreeSet<String> {
    let mut s = TcpStream::connect(("127.0.0.1", stats)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut json = String::new();
    s.read_to_string(&mut json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["alpha"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, stats)| stats.get("server_eof").is_some())
        .map(|(name, _)| name.clone())
        .collect()
}
