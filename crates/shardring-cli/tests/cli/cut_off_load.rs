//! What the fault-injection suites of a planned change share ([`crate::cut_off`] with etcd,
//! [`crate::cut_off_files`] with the proxies' files): the backends of either protocol, the
//! versioned read/write load through every participant with its recorded history, the keys that
//! move, and the check of that history (no read older than a write acknowledged before it began,
//! no acknowledged write lost), printed as a table and a `cut-off summary` line.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::shardring;
use shardring_etcd::Participant;
use test_support::history::{History, Outcome};
use test_support::{Memcached, RedisServer};

/// The keys the load writes and reads.
pub const KEYS: usize = 48;
/// Keys written before the change and never touched by the load (they give the copy its length).
pub const FILLER: usize = 600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// memcached's text protocol.
    Memcache,
    /// RESP.
    Redis,
}

/// The backends of either protocol.
pub enum Backends {
    /// memcached servers.
    Memcache(Vec<Memcached>),
    /// redis-server servers.
    Redis(Vec<RedisServer>),
}

impl Backends {
    pub fn start(proto: Proto) -> Option<Backends> {
        Some(match proto {
            Proto::Memcache => Backends::Memcache((0..4).map(|_| Memcached::start()).collect()),
            Proto::Redis => Backends::Redis(
                (0..4)
                    .map(|_| RedisServer::start(&[]))
                    .collect::<Option<Vec<_>>>()?,
            ),
        })
    }

    pub fn addrs(&self) -> Vec<String> {
        match self {
            Backends::Memcache(s) => s.iter().map(|m| m.addr.clone()).collect(),
            Backends::Redis(s) => s.iter().map(|r| r.addr.clone()).collect(),
        }
    }
}

/// A pool file over `servers` listening on `listen`.
pub fn yaml(proto: Proto, listen: u16, servers: &[String]) -> String {
    let mut y = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n  redis: {}\n  servers:\n",
        proto == Proto::Redis
    );
    for s in servers {
        y.push_str(&format!("   - {s}:1\n"));
    }
    y
}

/// One connection to a proxy, opened again after a failure.
pub struct Conn {
    addr: String,
    proto: Proto,
    io: Option<BufReader<TcpStream>>,
}

impl Conn {
    pub fn new(addr: String, proto: Proto) -> Conn {
        Conn {
            addr,
            proto,
            io: None,
        }
    }

    /// Sends `request` and reads one answer with `read`; a failure of the connection is an error
    /// (and the next call connects again).
    fn call<T>(
        &mut self,
        request: &[u8],
        read: impl FnOnce(&mut BufReader<TcpStream>) -> std::io::Result<T>,
    ) -> Result<T, String> {
        if self.io.is_none() {
            let s = TcpStream::connect(&self.addr).map_err(|e| format!("connect: {e}"))?;
            s.set_read_timeout(Some(Duration::from_secs(4))).ok();
            s.set_nodelay(true).ok();
            self.io = Some(BufReader::new(s));
        }
        let io = self.io.as_mut().ok_or("no connection")?;
        let r = io.get_mut().write_all(request).and_then(|()| read(io));
        r.map_err(|e| {
            self.io = None;
            format!("io: {e}")
        })
    }

    fn line(io: &mut BufReader<TcpStream>) -> std::io::Result<String> {
        let mut l = String::new();
        if io.read_line(&mut l)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(l.trim_end().to_owned())
    }

    pub fn set(&mut self, key: &str, version: u64) -> Result<(), String> {
        let value = format!("v{version}");
        let (request, ok) = match self.proto {
            Proto::Memcache => (
                format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()),
                "STORED",
            ),
            Proto::Redis => (test_support::redis::resp(&["SET", key, &value]), "+OK"),
        };
        let line = self.call(request.as_bytes(), Conn::line)?;
        if line == ok {
            Ok(())
        } else {
            Err(line)
        }
    }

    pub fn get(&mut self, key: &str) -> Result<Option<u64>, String> {
        let proto = self.proto;
        let request = match proto {
            Proto::Memcache => format!("get {key}\r\n"),
            Proto::Redis => test_support::redis::resp(&["GET", key]),
        };
        let answer = self.call(request.as_bytes(), |io| {
            let head = Conn::line(io)?;
            let len = match proto {
                Proto::Memcache if head.starts_with("VALUE ") => head.rsplit(' ').next(),
                Proto::Redis if head.starts_with('$') && head != "$-1" => head.get(1..),
                _ => return Ok(Err(head)),
            };
            let len: usize = len.and_then(|l| l.parse().ok()).unwrap_or(0);
            let mut data = vec![0; len + 2];
            io.read_exact(&mut data)?;
            if proto == Proto::Memcache {
                let end = Conn::line(io)?;
                if end != "END" {
                    return Ok(Err(end));
                }
            }
            Ok(Ok(String::from_utf8_lossy(&data[..len]).into_owned()))
        })?;
        match answer {
            Ok(value) => value
                .strip_prefix('v')
                .and_then(|v| v.parse().ok())
                .map(Some)
                .ok_or_else(|| format!("not a version: {value:?}")),
            Err(line) if line == "END" || line == "$-1" => Ok(None),
            Err(line) => Err(line),
        }
    }
}

/// A client-side ring's application: the keys placed by a [`Participant`], each server spoken to
/// directly; a write goes to the owner and, during a change, to the next owner, and is
/// acknowledged once both took it.
pub struct RingClient {
    participant: Arc<Participant>,
    proto: Proto,
    conns: std::collections::HashMap<String, Conn>,
}

impl RingClient {
    fn conn(&mut self, addr: &str) -> &mut Conn {
        let proto = self.proto;
        self.conns
            .entry(addr.to_owned())
            .or_insert_with(|| Conn::new(addr.to_owned(), proto))
    }

    pub fn set(&mut self, key: &str, version: u64) -> Result<(), String> {
        let view = self.participant.view();
        let route = view
            .route(key.as_bytes())
            .map_err(|e| e.to_string())?
            .ok_or("no server")?;
        let writes: Vec<String> = route.writes().map(|m| m.addr().to_owned()).collect();
        for addr in writes {
            self.conn(&addr).set(key, version)?;
        }
        Ok(())
    }

    pub fn get(&mut self, key: &str) -> Result<Option<u64>, String> {
        let view = self.participant.view();
        let route = view
            .route(key.as_bytes())
            .map_err(|e| e.to_string())?
            .ok_or("no server")?;
        let owner = route.owner.addr().to_owned();
        self.conn(&owner).get(key)
    }
}

/// Where the load sends a participant's requests: a proxy, or a client-side ring.
#[derive(Clone)]
pub enum Endpoint {
    /// A proxy's listen address.
    Proxy(String),
    /// A client-side ring.
    Ring(Arc<Participant>),
}

/// One client of an [`Endpoint`].
pub enum Client {
    Proxy(Conn),
    Ring(RingClient),
}

impl Client {
    pub fn new(endpoint: &Endpoint, proto: Proto) -> Client {
        match endpoint {
            Endpoint::Proxy(addr) => Client::Proxy(Conn::new(addr.clone(), proto)),
            Endpoint::Ring(participant) => Client::Ring(RingClient {
                participant: Arc::clone(participant),
                proto,
                conns: Default::default(),
            }),
        }
    }

    pub fn set(&mut self, key: &str, version: u64) -> Result<(), String> {
        match self {
            Client::Proxy(c) => c.set(key, version),
            Client::Ring(c) => c.set(key, version),
        }
    }

    pub fn get(&mut self, key: &str) -> Result<Option<u64>, String> {
        match self {
            Client::Proxy(c) => c.get(key),
            Client::Ring(c) => c.get(key),
        }
    }
}

/// The load's key `i`: spread over the ring (keys that differ only in their last bytes may all
/// land on one server under fnv1a_64, as in nutcracker).
pub fn key(i: usize) -> String {
    format!(
        "{:016x}:cut-off",
        (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

/// The load: one writer per participant (each owns every n-th key, and sends each write through
/// the participants in turn), one reader per participant; everything recorded.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(history: &Arc<History>, endpoints: &[Endpoint], proto: Proto) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let n = endpoints.len();
        for w in 0..n {
            let (history, stop, endpoints) =
                (Arc::clone(history), Arc::clone(&stop), endpoints.to_vec());
            threads.push(std::thread::spawn(move || {
                let mut conns: Vec<Client> =
                    endpoints.iter().map(|e| Client::new(e, proto)).collect();
                let mut versions = vec![1u64; KEYS];
                let mut turn = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    for k in (w..KEYS).step_by(n) {
                        versions[k] += 1;
                        let p = turn % conns.len();
                        turn += 1;
                        let start = history.now();
                        let outcome = match conns[p].set(&key(k), versions[k]) {
                            Ok(()) => Outcome::Written,
                            Err(e) => Outcome::Failed(e),
                        };
                        history.record(p, k, Some(versions[k]), start, outcome);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }));
        }
        for (p, endpoint) in endpoints.iter().enumerate() {
            let (history, stop) = (Arc::clone(history), Arc::clone(&stop));
            let mut conn = Client::new(endpoint, proto);
            threads.push(std::thread::spawn(move || {
                let mut k = p;
                while !stop.load(Ordering::Relaxed) {
                    k = (k + 7) % KEYS;
                    let start = history.now();
                    let outcome = match conn.get(&key(k)) {
                        Ok(v) => Outcome::Read(v),
                        Err(e) => Outcome::Failed(e),
                    };
                    history.record(p, k, None, start, outcome);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }));
        }
        Load { stop, threads }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// What a run of `shardring migrate` did.
pub struct Migrated {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it wrote to stderr.
    pub stderr: String,
    /// How long it ran.
    pub took: Duration,
}

/// Reads `key` straight from a server: whether it holds it.
pub fn holds(proto: Proto, server: &str, key: &str) -> bool {
    let mut c = Conn::new(server.to_owned(), proto);
    matches!(c.get(key), Ok(Some(_)))
}

/// A `migrate` line callback that sends once, on the first line containing `pattern`, and the
/// receiver of that signal.
pub fn on_first(pattern: &'static str) -> (std::sync::mpsc::Receiver<()>, impl FnMut(&str)) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let mut tx = Some(tx);
    let on = move |line: &str| {
        if line.contains(pattern) {
            if let Some(tx) = tx.take() {
                let _ = tx.send(());
            }
        }
    };
    (rx, on)
}

/// The load's keys whose owner differs between the pool of `now` and that of `next` (two files),
/// as `shardring lookup` places them.
pub fn moved_keys(now: &Path, next: &Path) -> BTreeSet<usize> {
    let owners = |file: &Path| -> Vec<String> {
        let out = shardring()
            .args(["lookup", "--config"])
            .arg(file)
            .args((0..KEYS).map(key))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').nth(1).unwrap_or_default().to_owned())
            .collect()
    };
    let (before, after) = (owners(now), owners(next));
    assert_eq!(before.len(), KEYS);
    let moved: BTreeSet<usize> = (0..KEYS).filter(|&k| before[k] != after[k]).collect();
    assert!(!moved.is_empty(), "some of the load's keys move");
    moved
}

/// What [`Scene::check`] found, for a suite's own report.
#[derive(Debug, Clone, Copy)]
pub struct Checked {
    /// Reads older than a write acknowledged before they began.
    pub stale: usize,
    /// Acknowledged writes that no final read shows.
    pub lost: usize,
    /// Reads that succeeded.
    pub reads: u64,
    /// Writes acknowledged.
    pub writes: u64,
}

/// What [`Scene::check`] checks a history against: the participants and what the change moves.
pub struct Scene<'a> {
    /// The recorded history.
    pub history: &'a History,
    /// Every participant, in the history's order.
    pub endpoints: Vec<Endpoint>,
    /// Their protocol.
    pub proto: Proto,
    /// The load's keys that move (the only ones that may be fenced).
    pub moved: &'a BTreeSet<usize>,
    /// Each proxy's stats port and log, printed with `SHARDRING_CUT_OFF_LOGS`.
    pub proxies: Vec<(u16, PathBuf)>,
}

impl Scene<'_> {
    /// Ends the load, reads every key through every participant (the final phase: a lost write
    /// shows as a stale read there), checks the history and prints its table and summary line: no
    /// stale read, no lost write, the load ran, only keys that move were fenced, and each
    /// participant in `fenced` fenced some.
    pub fn check(&self, load: Load, name: &str, fenced: &[usize]) -> Checked {
        let Scene {
            history,
            endpoints,
            proto,
            moved,
            proxies,
        } = self;
        let (history, proto, moved) = (*history, *proto, *moved);
        load.stop();
        history.phase("final");
        for (p, endpoint) in endpoints.iter().enumerate() {
            let mut c = Client::new(endpoint, proto);
            for k in 0..KEYS {
                let start = history.now();
                let outcome = match c.get(&key(k)) {
                    Ok(v) => Outcome::Read(v),
                    Err(e) => Outcome::Failed(e),
                };
                assert!(
                    !matches!(&outcome, Outcome::Failed(_)),
                    "final read of {} through participant {p}: {outcome:?}",
                    key(k)
                );
                history.record(p, k, None, start, outcome);
            }
        }
        let report = history.check();
        let phases: Vec<String> = history
            .phases()
            .iter()
            .map(|(at, p)| format!("{p} at {:.1} s", at.as_secs_f64()))
            .collect();
        eprintln!("{name} ({proto:?}): {}\n{report}", phases.join(", "));
        if std::env::var_os("SHARDRING_CUT_OFF_LOGS").is_some() {
            for (stats_port, log) in proxies {
                let mut stats = String::new();
                if let Ok(mut c) = TcpStream::connect(("127.0.0.1", *stats_port)) {
                    let _ = c.read_to_string(&mut stats);
                }
                eprintln!("--- stats {stats}");
                let log_text = std::fs::read_to_string(log).unwrap_or_default();
                eprintln!("--- {}\n{log_text}", log.display());
            }
        }
        let (stale, lost) = report.violations();
        let sum = |f: fn(&test_support::history::Tally) -> u64| -> u64 {
            report.tallies.iter().map(|(_, t)| f(t)).sum()
        };
        // One line per run for scripts/soak-cut-off to add up.
        eprintln!(
            "cut-off summary\t{name}\t{proto:?}\treads={}\twrites={}\tfenced={}\terrors={}\tstale={stale}\tlost={lost}",
            sum(|t| t.reads),
            sum(|t| t.writes),
            sum(|t| t.fenced),
            sum(|t| t.errors),
        );
        assert_eq!((stale, lost), (0, 0), "stale reads, lost writes: {report}");
        let reads = sum(|t| t.reads);
        assert!(reads > 200, "the load ran: {report}");
        assert!(
            report.fenced_keys.is_subset(moved),
            "only keys that move are fenced: {:?} of {moved:?}",
            report.fenced_keys,
        );
        for &p in fenced {
            assert!(
                report.fenced(p) > 0,
                "proxy {p} fenced the keys that move: {report}"
            );
        }
        Checked {
            stale,
            lost,
            reads,
            writes: sum(|t| t.writes),
        }
    }
}

/// Runs `shardring migrate` as `cmd` sets it up, handing each line of its stderr to `on` as it comes.
pub fn watch_migrate(cmd: &mut std::process::Command, mut on: impl FnMut(&str)) -> Migrated {
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap_or_default();
        on(&line);
        stderr.push_str(&line);
        stderr.push('\n');
    }
    let status = child.wait().unwrap();
    Migrated {
        status,
        stderr,
        took: started.elapsed(),
    }
}
