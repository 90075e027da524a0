//! `shardring migrate` end to end, as an operator runs it: real memcached servers, two `shardring
//! proxy` processes with their own files and a shared `--next-config`, a read/write load through
//! both for the whole migration, then every key read back. A server removed (4 → 3) and one added
//! (4 → 5), 100,000 keys with mixed flags and TTLs; an abort halfway and a rerun; a proxy that does
//! not dual-write stops the run with its name.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::migrate_fleet::{join_loads, Fleet};
use crate::support::{shardring, Kill};
use test_support::{free_port, wait_listening, Memcached};

const KEYS: usize = 100_000;
/// 40 days: an expiry memcached takes as a Unix time.
const FAR: u64 = 40 * 24 * 3600;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn key(i: usize) -> String {
    format!("user:{i}:profile")
}

/// Each key's flags, and its TTL class: none, an hour, or an absolute time 40 days out.
fn flags(i: usize) -> u32 {
    (i % 7) as u32 * 1000
}

/// What a set of key `i` sends as exptime, and the expiry it means (0: none).
fn exptime(i: usize, far: u64) -> (u64, u64) {
    match i % 3 {
        0 => (0, 0),
        1 => (3600, unix_now() + 3600),
        _ => (far, far),
    }
}

/// The expiry key `i` got from the fill at `fill_time` (0: none).
fn filled_expiry(i: usize, far: u64, fill_time: u64) -> u64 {
    match i % 3 {
        0 => 0,
        1 => fill_time + 3600,
        _ => far,
    }
}

/// Keys the load deletes during the migration.
fn deleted_by_load(i: usize) -> bool {
    i % 1000 == 7
}

/// A blocking memcached text-protocol client.
struct Mc {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Mc {
    fn connect(addr: &str) -> Mc {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Mc {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }

    fn call(&mut self, req: &[u8]) -> String {
        self.w.write_all(req).unwrap();
        self.line()
    }

    /// `mg key v f t`: the value, flags and remaining TTL (-1: none), or `None` on a miss.
    fn mg(&mut self, key: &str) -> Option<(Vec<u8>, u32, i64)> {
        let head = self.call(format!("mg {key} v f t\r\n").as_bytes());
        if head == "EN\r\n" {
            return None;
        }
        let mut parts = head.split_whitespace();
        assert_eq!(parts.next(), Some("VA"), "{head:?}");
        let len: usize = parts.next().unwrap().parse().unwrap();
        let (mut f, mut t) = (0, 0);
        for p in parts {
            if let Some(v) = p.strip_prefix('f') {
                f = v.parse().unwrap();
            } else if let Some(v) = p.strip_prefix('t') {
                t = v.parse().unwrap();
            }
        }
        let mut data = vec![0; len + 2];
        self.r.read_exact(&mut data).unwrap();
        data.truncate(len);
        Some((data, f, t))
    }

    /// The server's request counters that any client command moves.
    fn commands(&mut self) -> u64 {
        self.w.write_all(b"stats\r\n").unwrap();
        let mut total = 0;
        loop {
            let l = self.line();
            if l == "END\r\n" {
                return total;
            }
            let mut p = l.split_whitespace().skip(1);
            let (name, value) = (p.next().unwrap_or(""), p.next().unwrap_or("0"));
            if [
                "cmd_get",
                "cmd_set",
                "cmd_touch",
                "delete_hits",
                "delete_misses",
                "incr_hits",
                "incr_misses",
                "decr_hits",
                "decr_misses",
            ]
            .contains(&name)
            {
                total += value.parse::<u64>().unwrap_or(0);
            }
        }
    }
}

/// The pool file of a proxy listening on `listen` over `servers` (every other one named).
fn yaml(listen: u16, servers: &[&Memcached]) -> String {
    let mut y = format!("alpha:\n  listen: 127.0.0.1:{listen}\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n  servers:\n");
    for s in servers {
        if s.port % 2 == 0 {
            y.push_str(&format!("   - {}:1 mc-{}\n", s.addr, s.port));
        } else {
            y.push_str(&format!("   - {}:1\n", s.addr));
        }
    }
    y
}

/// Stores every key through `addr`: value `v<i>`, its flags and TTL; returns the far expiry and
/// the fill's time.
fn fill(addr: &str) -> (u64, u64) {
    // Absolute expiries (as memcached takes any exptime over 30 days), so each key's is known
    // exactly however long the fill takes.
    let fill_time = unix_now();
    let far = fill_time + FAR;
    let mut c = Mc::connect(addr);
    for start in (0..KEYS).step_by(1000) {
        let mut batch = Vec::new();
        for i in start..(start + 1000).min(KEYS) {
            let v = format!("v{i}");
            let exp = filled_expiry(i, far, fill_time);
            batch.extend_from_slice(
                format!(
                    "set {} {} {exp} {} noreply\r\n{v}\r\n",
                    key(i),
                    flags(i),
                    v.len()
                )
                .as_bytes(),
            );
        }
        c.w.write_all(&batch).unwrap();
    }
    assert_eq!(c.call(b"mn\r\n"), "MN\r\n");
    (far, fill_time)
}

/// What one load thread expects of its keys: the value (none once deleted) and expiry.
type Expected = HashMap<usize, (Option<Vec<u8>>, u64)>;

/// Reads and writes the keys `i % 2 == part` through `addr` until `stop`: 80% reads (each must hit
/// unless the key was deleted), sets, appends, and deletes of the keys [`deleted_by_load`] picks.
/// Returns what it expects of every key it changed, and its misses.
fn load(
    addr: String,
    part: usize,
    (far, fill_time): (u64, u64),
    stop: Arc<AtomicBool>,
) -> (Expected, Vec<String>) {
    let mut c = Mc::connect(&addr);
    let mut expected = Expected::new();
    let mut misses = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ part as u64;
    let mut gen = 0u64;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = ((x >> 8) as usize % (KEYS / 2)) * 2 + part;
        let op = x % 100;
        let k = key(i);
        if deleted_by_load(i) {
            if op < 50 && !expected.contains_key(&i) {
                assert!(c
                    .call(format!("delete {k}\r\n").as_bytes())
                    .starts_with("DELETED"));
                expected.insert(i, (None, 0));
            }
            continue;
        }
        if op < 80 {
            if c.mg(&k).is_none() {
                misses.push(k);
            }
        } else if op < 92 {
            gen += 1;
            let v = format!("v{i}-{gen}");
            let (exp, expiry) = exptime(i, far);
            let line =
                c.call(format!("set {k} {} {exp} {}\r\n{v}\r\n", flags(i), v.len()).as_bytes());
            assert_eq!(line, "STORED\r\n");
            expected.insert(i, (Some(v.into_bytes()), expiry));
        } else {
            let line = c.call(format!("append {k} 0 0 2\r\n+a\r\n").as_bytes());
            assert_eq!(line, "STORED\r\n", "append of {k}");
            let e = expected.entry(i).or_insert_with(|| {
                (
                    Some(format!("v{i}").into_bytes()),
                    filled_expiry(i, far, fill_time),
                )
            });
            if let Some(v) = &mut e.0 {
                v.extend_from_slice(b"+a");
            }
        }
    }
    (expected, misses)
}

/// Every key read back through `addr`: its latest value, flags and TTL (±2 s).
fn check_all(addr: &str, expected: &Expected, far: u64, fill_time: u64) {
    let mut c = Mc::connect(addr);
    let mut wrong = Vec::new();
    for i in 0..KEYS {
        // The remaining TTL as of this read (the whole check takes seconds).
        let now = unix_now();
        let got = c.mg(&key(i));
        let (value, expiry) = match expected.get(&i) {
            Some((v, e)) => (v.clone(), *e),
            None => (
                Some(format!("v{i}").into_bytes()),
                filled_expiry(i, far, fill_time),
            ),
        };
        match (got, value) {
            (None, None) => {}
            (Some((v, f, t)), Some(want)) => {
                let ttl_ok = if expiry == 0 {
                    t == -1
                } else {
                    // ±2 s, and the second memcached's clock (it ticks once a second, late on
                    // a loaded machine) may lag ours by.
                    (t - (expiry as i64 - now as i64)).abs() <= 3
                };
                if v != want || f != flags(i) || !ttl_ok {
                    wrong.push(format!(
                        "{}: {:?} f{f} t{t}, wanted {:?} f{} expiry in {}",
                        key(i),
                        String::from_utf8_lossy(&v),
                        String::from_utf8_lossy(&want),
                        flags(i),
                        expiry as i64 - now as i64
                    ));
                }
            }
            (got, want) => wrong.push(format!(
                "{}: {:?}, wanted {:?}",
                key(i),
                got.map(|g| g.0),
                want
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} keys wrong, e.g.:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(10)].join("\n")
    );
}

/// The whole migration from `now` to `next` under load; returns migrate's stdout.
fn migrate_under_load(servers: &[Memcached], now: &[usize], next: &[usize]) -> String {
    let now: Vec<&Memcached> = now.iter().map(|&i| &servers[i]).collect();
    let next: Vec<&Memcached> = next.iter().map(|&i| &servers[i]).collect();
    let fleet = Fleet::start(|l| yaml(l, &now), &[]);
    let (far, fill_time) = fill(&fleet.addr(0));
    fleet.plan(&yaml(free_port(), &next));
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (0..2)
        .map(|p| {
            let (addr, stop) = (fleet.addr(p), Arc::clone(&stop));
            std::thread::spawn(move || load(addr, p, (far, fill_time), stop))
        })
        .collect();
    let out = fleet.migrate(&[]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "migrate failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The servers that left get nothing from now on.
    let left: Vec<&&Memcached> = now
        .iter()
        .filter(|s| !next.iter().any(|n| n.addr == s.addr))
        .collect();
    let mut watchers: Vec<Mc> = left.iter().map(|s| Mc::connect(&s.addr)).collect();
    let before: Vec<u64> = watchers.iter_mut().map(Mc::commands).collect();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let expected: Expected = join_loads(loads);
    let after: Vec<u64> = watchers.iter_mut().map(Mc::commands).collect();
    assert_eq!(
        before, after,
        "a server that left got requests after the cut-over"
    );
    for p in 0..2 {
        check_all(&fleet.addr(p), &expected, far, fill_time);
    }
    // The files now name the next servers, the next file too.
    for f in fleet.files.iter().chain([&fleet.next]) {
        let text = std::fs::read_to_string(f).unwrap();
        for s in &next {
            assert!(
                text.contains(&s.addr),
                "{} lacks {}:\n{text}",
                f.display(),
                s.addr
            );
        }
        for s in &left {
            assert!(
                !text.contains(&s.addr),
                "{} still has {}",
                f.display(),
                s.addr
            );
        }
    }
    let _ = &fleet.dir;
    stdout
}

#[test]
fn a_removed_server_s_keys_move_under_load_and_every_key_reads_back() {
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let out = migrate_under_load(&servers, &[0, 1, 2, 3], &[0, 1, 2]);
    assert!(out.contains("(leaves)"), "{out}");
    assert!(out.contains("cut over: every proxy (2)"), "{out}");
}

#[test]
fn an_added_server_gets_its_keys_under_load_and_every_key_reads_back() {
    let servers: Vec<Memcached> = (0..5).map(|_| Memcached::start()).collect();
    let out = migrate_under_load(&servers, &[0, 1, 2, 3], &[0, 1, 2, 3, 4]);
    assert!(out.contains("cut over: every proxy (2)"), "{out}");
}

#[test]
fn an_abort_halfway_changes_nothing_and_a_rerun_finishes() {
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let now: Vec<&Memcached> = servers.iter().collect();
    let fleet = Fleet::start(|l| yaml(l, &now), &[]);
    let (far, fill_time) = fill(&fleet.addr(0));
    fleet.plan(&yaml(free_port(), &now[..3]));
    let files_before: Vec<String> = fleet
        .files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    // Slow enough to be killed halfway.
    let mut child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .arg("migrate")
        .args(
            fleet
                .files
                .iter()
                .flat_map(|f| [Path::new("-c"), f.as_path()]),
        )
        .arg("--to")
        .arg(&fleet.next)
        .args([
            "--pool",
            "alpha",
            "--proxies",
            &fleet.stats_list(),
            "--rate",
            "5000",
            // At the tests' own priority: the idle class may not get a turn on a busy test machine.
            "--nice",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed once it has copied for a while (not after a fixed time: the survey and the proxies'
    // check before the copy take longer on a loaded machine).
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in &mut stderr {
        if line.unwrap().contains("copying") {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(1000));
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stderr); // (kept open until the kill: a closed pipe would end the run another way)
    for (f, before) in fleet.files.iter().zip(&files_before) {
        assert_eq!(
            &std::fs::read_to_string(f).unwrap(),
            before,
            "the ring did not change"
        );
    }
    let out = fleet.migrate(&["--rate", "0"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The rerun found what the first run copied already there.
    let there: u64 = stdout
        .split(" already there")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of keys already there in {stdout}"));
    assert!(there > 0, "{stdout}");
    check_all(&fleet.addr(1), &Expected::new(), far, fill_time);
}

#[test]
fn a_proxy_that_does_not_dual_write_stops_the_run_with_its_name() {
    let servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let now: Vec<&Memcached> = servers.iter().collect();
    let fleet = Fleet::start(|l| yaml(l, &now), &[]);
    // A third proxy, without the next file.
    let listen = free_port();
    let stat = free_port();
    let file = fleet.dir.path().join("lagging.yml");
    std::fs::write(&file, yaml(listen, &now)).unwrap();
    let _lagging = Kill(
        StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
            .args(["proxy", "-s", &stat.to_string(), "-c"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&format!("127.0.0.1:{stat}"));
    fleet.plan(&yaml(free_port(), &now[..2]));
    let out = shardring()
        .arg("migrate")
        .arg("-c")
        .arg(&fleet.files[0])
        .arg("--to")
        .arg(&fleet.next)
        .args([
            "--pool",
            "alpha",
            "--proxies",
            &format!("{},127.0.0.1:{stat}", fleet.stats_list()),
            "--confirm-timeout",
            "2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("127.0.0.1:{stat} serves current")),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 of 3 proxies do not dual-write"),
        "{stderr}"
    );
    // What it serves instead is named: the old membership as next, not the new one.
    assert!(
        stderr.contains("its next membership (") && stderr.contains(") is the old membership"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("copied"), "nothing was copied: {stdout}");
}

/// Two proxies whose files list the same servers in other orders place every key alike
/// (nutcracker sorts a pool's servers), so they report the same membership and a migration goes
/// through; a proxy whose file differs in one server is named with that server.
#[test]
fn proxies_listing_the_servers_in_other_orders_agree_and_one_that_differs_is_named() {
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let now: Vec<&Memcached> = servers.iter().collect();
    let calls = std::cell::Cell::new(0);
    // The next file, then proxy 0 in the file's order, then proxy 1 in reverse.
    let fleet = Fleet::start(
        |l| {
            calls.set(calls.get() + 1);
            let mut order = now.clone();
            if calls.get() == 3 {
                order.reverse();
            }
            yaml(l, &order)
        },
        &[],
    );
    let text = std::fs::read_to_string(&fleet.files[1]).unwrap();
    assert!(
        text.find(&servers[3].addr) < text.find(&servers[0].addr),
        "proxy 1 lists the servers in reverse: {text}"
    );
    // A third proxy, whose file gives one server another weight.
    let (listen, stat) = (free_port(), free_port());
    let file = fleet.dir.path().join("heavier.yml");
    let heavier = yaml(listen, &now).replacen(
        &format!("{}:1", servers[1].addr),
        &format!("{}:2", servers[1].addr),
        1,
    );
    std::fs::write(&file, &heavier).unwrap();
    let _heavier = Kill(
        StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
            .args(["proxy", "-s", &stat.to_string(), "-c"])
            .arg(&file)
            .arg("--next-config")
            .arg(&fleet.next)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&format!("127.0.0.1:{stat}"));
    let mut next = now[1..].to_vec();
    next.reverse();
    fleet.plan(&yaml(free_port(), &next));
    crate::support::signal("-HUP", &_heavier.0.id().to_string());
    let out = shardring()
        .arg("migrate")
        .arg("-c")
        .arg(&fleet.files[0])
        .arg("--to")
        .arg(&fleet.next)
        .args([
            "--pool",
            "alpha",
            "--proxies",
            &format!("{},127.0.0.1:{stat}", fleet.stats_list()),
            "--confirm-timeout",
            "3",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("1 of 3 proxies do not dual-write"),
        "only the third proxy lags: {stderr}"
    );
    let weight = servers[1].addr.clone();
    assert!(
        stderr.contains(&format!("+{weight}:2")) && stderr.contains(&format!("-{weight}:1")),
        "the server that differs is named: {stderr}"
    );
    // Without the third, the two that list the servers in other orders migrate.
    fleet.migrate(&[]).assert().success();
}

#[test]
fn a_dry_run_prints_the_plan_and_changes_nothing() {
    let servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let now: Vec<&Memcached> = servers.iter().collect();
    let fleet = Fleet::start(|l| yaml(l, &now), &[]);
    let mut c = Mc::connect(&fleet.addr(0));
    for i in 0..3000 {
        assert_eq!(
            c.call(format!("set {} 0 0 1\r\nx\r\n", key(i)).as_bytes()),
            "STORED\r\n"
        );
    }
    fleet.plan(&yaml(free_port(), &now[..2]));
    let before = std::fs::read_to_string(&fleet.files[0]).unwrap();
    let out = fleet.migrate(&["--dry-run"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("pool alpha (memcached): 3 → 2 servers"),
        "{stdout}"
    );
    assert!(stdout.contains("total: "), "{stdout}");
    // The two that stay lose no hash range: not scanned; the one that leaves is.
    let whole = stdout.matches("keeps every key (none of its hash ranges moves: not scanned)");
    assert_eq!(whole.count(), 2, "{stdout}");
    assert!(stdout.contains("(leaves): "), "{stdout}");
    assert!(stdout.contains("keys scanned move"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&fleet.files[0]).unwrap(), before);
    // Another hash moves nearly every key: refused without --all-keys.
    std::fs::write(
        &fleet.next,
        yaml(free_port(), &now[..2]).replace("fnv1a_64", "md5"),
    )
    .unwrap();
    let out = fleet.migrate(&["--dry-run"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("--all-keys"), "{stderr}");
}

/// `shardring members --etcd URL --pool alpha -c FILE publish EXTRA…`, which must succeed.
fn publish_members(url: &str, file: &Path, extra: &[&str]) {
    shardring()
        .args(["members", "--etcd", url, "--pool", "alpha", "-c"])
        .arg(file)
        .arg("publish")
        .args(extra)
        .assert()
        .success();
}

#[test]
fn with_etcd_the_proxies_register_dual_write_and_cut_over_together() {
    if !test_support::etcd_available() {
        return;
    }
    let etcd = test_support::Etcd::start();
    let url = etcd.url();
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let now: Vec<&Memcached> = servers.iter().collect();
    let dir = test_support::TempDir::new("migrate-etcd");
    let file = |name: &str, servers: &[&Memcached]| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml(free_port(), servers)).unwrap();
        path
    };
    let (now_file, next_file) = (file("now.yml", &now), file("next.yml", &now[..3]));
    let members = |f: &Path, extra: &[&str]| publish_members(&url, f, extra);
    members(&now_file, &[]);
    let fleet = Fleet::start(|l| yaml(l, &now), &["--etcd", &url]);
    let (far, fill_time) = fill(&fleet.addr(0));
    members(&next_file, &["--next"]);
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (0..2)
        .map(|p| {
            let (addr, stop) = (fleet.addr(p), Arc::clone(&stop));
            std::thread::spawn(move || load(addr, p, (far, fill_time), stop))
        })
        .collect();
    let out = shardring()
        .args([
            "migrate",
            "--etcd",
            &url,
            "--pool",
            "alpha",
            "--confirm-timeout",
            "20",
            // As `Fleet::migrate`: at the tests' own CPU priority.
            "--nice",
            "0",
            "-c",
        ])
        .arg(&fleet.files[0])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("cut over: every participant (2)"),
        "{stdout}"
    );
    eprintln!("{stdout}");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let expected: Expected = join_loads(loads);
    for p in 0..2 {
        check_all(&fleet.addr(p), &expected, far, fill_time);
    }
    // etcd holds the next servers as current, and no next membership.
    let listed = shardring()
        .args(["members", "--etcd", &url, "--pool", "alpha", "list"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(!listed.contains(&servers[3].addr), "{listed}");
    let again = shardring()
        .args([
            "migrate",
            "--etcd",
            &url,
            "--pool",
            "alpha",
            "--dry-run",
            "-c",
        ])
        .arg(&fleet.files[0])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stderr).contains("has no next membership"));
}

/// Issue #43: a cut-over mark in the `--to` file that records another change than the files show
/// (here: other placements) is refused with exit code 2 before anything is touched: no file
/// rewritten, no proxy reloaded, nothing copied.
#[test]
fn a_cut_over_mark_that_does_not_match_the_files_is_refused_and_nothing_is_touched() {
    let servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let now: Vec<&Memcached> = servers.iter().collect();
    let fleet = Fleet::start(|l| yaml(l, &now), &[]);
    let mark = format!(
        "# shardring migrate cut over: pool=alpha from=00000000000000aa to=00000000000000bb \
         servers={}:1,{}:1\n",
        servers[0].addr, servers[1].addr
    );
    fleet.plan(&format!("{mark}{}", yaml(free_port(), &now[..2])));
    let before: Vec<String> = fleet
        .files
        .iter()
        .chain([&fleet.next])
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let out = fleet.migrate(&[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was cut over from 00000000000000aa to 00000000000000bb")
            && stderr.contains("nothing was changed")
            && stderr.contains("remove the mark line"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no plan, no copy");
    let after: Vec<String> = fleet
        .files
        .iter()
        .chain([&fleet.next])
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert_eq!(before, after, "no file rewritten");
}

/// A change back over servers that kept the keys of an earlier change (4 → 3 without
/// `--delete-moved`, then 3 → 4): the removed server still holds the old values of its keys, and
/// the keys were written since through the 3-server pool. Before, the copy back added nothing over
/// the leftovers (`NS`: "the target has a newer value") and the proxies served them after the
/// second cut-over: values older than acknowledged ones.
#[test]
fn a_change_back_over_leftovers_of_an_earlier_change_serves_the_newest_values() {
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let all: Vec<&Memcached> = servers.iter().collect();
    let fleet = Fleet::start(|l| yaml(l, &all), &[]);
    let addr = fleet.addr(0);
    let mut c = Mc::connect(&addr);
    let keys: Vec<String> = (0..2000).map(|i| format!("back:{i}")).collect();
    for k in &keys {
        assert_eq!(
            c.call(format!("set {k} 0 0 2\r\nv1\r\n").as_bytes()),
            "STORED\r\n"
        );
    }
    fleet.plan(&yaml(free_port(), &all[..3]));
    let out = fleet.migrate(&[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Written through the 3-server pool: server 3 keeps its v1s.
    let mut left = Mc::connect(&servers[3].addr);
    let kept_before = keys.iter().filter(|k| left.mg(k).is_some()).count();
    for k in &keys {
        assert_eq!(
            c.call(format!("set {k} 0 0 2\r\nv2\r\n").as_bytes()),
            "STORED\r\n"
        );
    }
    let leftovers = keys.iter().filter(|k| left.mg(k).is_some()).count();
    assert!(
        leftovers > 100,
        "server 3 kept {leftovers} keys ({kept_before} before they were written again)"
    );
    fleet.plan(&yaml(free_port(), &all));
    let out = fleet.migrate(&[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for p in 0..2 {
        let mut c = Mc::connect(&fleet.addr(p));
        let stale: Vec<&String> = keys
            .iter()
            .filter(|k| c.mg(k).map(|(v, _, _)| v) != Some(b"v2".to_vec()))
            .collect();
        assert!(
            stale.is_empty(),
            "proxy {p}: {} keys not v2 after the change back (e.g. {:?}); server 3 had kept {leftovers}",
            stale.len(),
            &stale[..stale.len().min(3)]
        );
    }
}

/// Pool `alpha`'s `membership_current` and `membership_next` on stats port `stats`.
fn memberships(stats: u16) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", stats)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut json = String::new();
    s.read_to_string(&mut json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let field = |name: &str| v["alpha"][name].as_str().unwrap_or_default().to_owned();
    (field("membership_current"), field("membership_next"))
}

/// Polls `stats` until the pool serves `(current, next)`; panics after 10 s.
fn wait_memberships(stats: u16, want: &(String, String), what: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = memberships(stats);
        if got == *want {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "{what}: serves {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A proxy (re)started, or reloaded, in the window between `migrate`'s write of the `--to` file
/// (the old servers as next, and the cut-over mark) and its write of the proxy's own file: both
/// files then list the old servers. It takes the mark's servers, as the other proxies do once their
/// files are written. Before, it served the old servers alone and dual-wrote no moving key, while
/// the proxies that had switched read those keys from their new owners.
#[test]
fn a_proxy_started_between_the_cut_over_writes_serves_the_marked_servers() {
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let all: Vec<&Memcached> = servers.iter().collect();
    let fleet = Fleet::start(|l| yaml(l, &all), &[]);
    let (stat0, stat1) = (fleet.stats[0], fleet.stats[1]);
    let unplanned = memberships(stat0);
    assert_eq!(unplanned.0, unplanned.1);
    fleet.plan(&yaml(free_port(), &all[..3]));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let planned = loop {
        let m = memberships(stat0);
        if m.0 != m.1 {
            break m;
        }
        assert!(std::time::Instant::now() < until, "never planned: {m:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (old, new) = planned.clone();
    assert_eq!(old, unplanned.0);
    // What `migrate`'s cut-over writes first: the next file with the old servers and the mark.
    let three: Vec<String> = yaml(0, &all[..3])
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- ").map(str::to_owned))
        .collect();
    std::fs::write(
        &fleet.next,
        format!(
            "# shardring migrate cut over: pool=alpha from={old} to={new} servers={}\n{}",
            three.join(","),
            yaml(free_port(), &all)
        ),
    )
    .unwrap();
    let swapped = (new.clone(), old.clone());
    // A proxy that starts now, with its own file still listing the old servers.
    let (listen, stat) = (free_port(), free_port());
    let file = fleet.dir.path().join("late.yml");
    std::fs::write(&file, yaml(listen, &all)).unwrap();
    let log = fleet.dir.path().join("late.log");
    let _late = Kill(
        StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
            .args(["proxy", "-s", &stat.to_string(), "-c"])
            .arg(&file)
            .arg("--next-config")
            .arg(&fleet.next)
            .arg("-o")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&format!("127.0.0.1:{stat}"));
    assert_eq!(
        memberships(stat),
        swapped,
        "the proxy started in the window"
    );
    // One that reloads now (its file unchanged): the same.
    crate::support::signal("-HUP", &fleet.proxies[1].0.id().to_string());
    wait_memberships(stat1, &swapped, "the proxy reloaded in the window");
    let text = std::fs::read_to_string(fleet.dir.path().join("proxy1.log")).unwrap();
    assert!(text.contains("marks a cut-over"), "{text}");
    // A mark whose `from` is not the file's placement changes nothing.
    std::fs::write(
        &fleet.next,
        format!(
            "# shardring migrate cut over: pool=alpha from=0000 to={new} servers={}\n{}",
            three.join(","),
            yaml(free_port(), &all[..3])
        ),
    )
    .unwrap();
    crate::support::signal("-HUP", &fleet.proxies[1].0.id().to_string());
    wait_memberships(stat1, &planned, "a mark from another placement");
}

/// 1000 keys stored through the proxy at `addr`, at least 20 of them on `servers[3]` (the one the
/// deletion tests remove).
fn deletable_keys(addr: &str, servers: &[Memcached]) -> Vec<String> {
    let mut c = Mc::connect(addr);
    let keys: Vec<String> = (0..1000).map(|i| format!("del:{i}")).collect();
    for k in &keys {
        assert_eq!(
            c.call(format!("set {k} 0 0 1\r\nv\r\n").as_bytes()),
            "STORED\r\n"
        );
    }
    let spread: Vec<usize> = servers
        .iter()
        .map(|s| {
            let mut m = Mc::connect(&s.addr);
            keys.iter().filter(|k| m.mg(k).is_some()).count()
        })
        .collect();
    assert!(spread[3] > 20, "server 3 holds too few: {spread:?}");
    keys
}

/// `--delete-moved` whose deletion fails (the removed server paused from the cut-over on: the
/// deletion times out on it) after the change itself is done and `next` dropped: the run exits
/// non-zero saying so and leaves a record of the deletion (`recorded` checks it), and a rerun of the
/// same command (the server back) deletes the moved keys and clears the record. Before, the rerun
/// found no change to make and the keys stayed. `plan` publishes the change to 3 servers once the
/// keys are written, `migrate` is the run (`--delete-moved` among its flags), `cut_over_line` what
/// it prints at its cut-over; returns the third run's output (nothing left to do).
fn failed_deletion_is_redone(
    servers: &[Memcached],
    fleet: &Fleet,
    plan: impl FnOnce(),
    migrate: impl Fn() -> StdCommand,
    cut_over_line: &str,
    recorded: impl Fn(bool),
) -> std::process::Output {
    let keys = deletable_keys(&fleet.addr(0), servers);
    let mut left = Mc::connect(&servers[3].addr);
    let on_left = |m: &mut Mc| keys.iter().filter(|k| m.mg(k).is_some()).count();
    let before = on_left(&mut left);
    plan();
    let first = crate::cut_off_load::watch_migrate(&mut migrate(), |line| {
        if line.contains(cut_over_line) {
            servers[3].pause();
        }
    });
    servers[3].resume();
    assert!(!first.status.success(), "{}", first.stderr);
    assert!(
        first
            .stderr
            .contains("a rerun of the same command deletes them"),
        "{}",
        first.stderr
    );
    recorded(true);
    assert_eq!(on_left(&mut left), before, "the first run deleted nothing");
    // At once after the server resumes, with every key just read on it (`on_left`): an LRU walk
    // (`metadump all`) listed a part of them here and the rerun left the rest.
    let second = migrate().output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&second.stdout),
        String::from_utf8_lossy(&second.stderr),
    );
    assert!(second.status.success(), "{stderr}");
    assert!(stderr.contains("deleting them"), "{stderr}");
    assert_eq!(on_left(&mut left), 0, "{before} {stderr} {stdout}");
    recorded(false);
    assert!(
        stdout.contains(&format!("deleted {before} moved keys")),
        "{before}: {stdout}\n{stderr}"
    );
    // Nothing more to do: a third run says there is no change.
    let third = migrate().output().unwrap();
    assert!(!third.status.success());
    // Every key still reads through the proxies.
    for p in 0..2 {
        let mut c = Mc::connect(&fleet.addr(p));
        assert!(keys.iter().all(|k| c.mg(k).is_some()), "proxy {p}");
    }
    third
}

/// [`failed_deletion_is_redone`] without etcd: the record is a mark line in the `--to` file.
#[test]
fn a_failed_delete_moved_is_done_by_a_rerun() {
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let all: Vec<&Memcached> = servers.iter().collect();
    let fleet = Fleet::start(|l| yaml(l, &all), &[]);
    let recorded = |pending: bool| {
        let next = std::fs::read_to_string(&fleet.next).unwrap();
        if pending {
            assert!(
                next.starts_with("# shardring migrate deleting moved keys: pool=alpha "),
                "{next}"
            );
        } else {
            assert!(!next.contains("# shardring migrate"), "{next}");
        }
    };
    failed_deletion_is_redone(
        &servers,
        &fleet,
        || fleet.plan(&yaml(free_port(), &all[..3])),
        || fleet.migrate_command(&["--delete-moved"]),
        "cut over in the files",
        recorded,
    );
}

/// [`failed_deletion_is_redone`] with etcd: the record is etcd's `delete-moved` key, written with
/// the drop of `next/`.
#[test]
fn with_etcd_a_failed_delete_moved_is_done_by_a_rerun() {
    if !test_support::etcd_available() {
        return;
    }
    let etcd = test_support::Etcd::start();
    let url = etcd.url();
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let all: Vec<&Memcached> = servers.iter().collect();
    let dir = test_support::TempDir::new("migrate-etcd-delete");
    let publish = |servers: &[&Memcached], extra: &[&str]| {
        let path = dir.path().join("members.yml");
        std::fs::write(&path, yaml(free_port(), servers)).unwrap();
        publish_members(&url, &path, extra);
    };
    publish(&all, &[]);
    let fleet = Fleet::start(|l| yaml(l, &all), &["--etcd", &url]);
    let migrate = || {
        let mut cmd = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"));
        cmd.args([
            "migrate",
            "--etcd",
            &url,
            "--pool",
            "alpha",
            "--confirm-timeout",
            "20",
            "--nice",
            "0",
            "--delete-moved",
            "-c",
        ])
        .arg(&fleet.files[0]);
        cmd
    };
    let third = failed_deletion_is_redone(
        &servers,
        &fleet,
        || publish(&all[..3], &["--next"]),
        migrate,
        "cut over in etcd",
        |_| {},
    );
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert!(stderr.contains("has no next membership"), "{stderr}");
}
