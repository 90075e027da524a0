//! A small memcached and Redis load generator with latency percentiles, for `scripts/bench-proxy`.
//!
//! `memload ADDR CONNS SECONDS OP [KEYS] [VALUE_BYTES]` where OP is, for memcached, `get`, `set`, `mget10`
//! or `load` (`load` stores every key once and exits), and for Redis (RESP2) `redis-get`, `redis-set`,
//! `redis-mget10`, `redis-mset10`, `redis-get-p16` (16 GETs pipelined in one write), `connect` and
//! `redis-connect` (a get on a new connection each time: what opening one costs), `redis-multi-set`
//! (`MULTI`, `SET`, `EXEC` in one write: one transaction, three replies), `redis-blmove` (`BLMOVE` of 64
//! lists seeded at start onto themselves, so it never waits: the cost of a blocking command on its own
//! connection) or `redis-load`. Each
//! connection sends one request (or one pipelined batch), reads the whole reply, and records the round
//! trip; requests are made before the timed loop. A pipelined batch counts as its 16 requests, as
//! redis-benchmark counts `-P 16`. An error reply (`SERVER_ERROR`, `CLIENT_ERROR`, a RESP `-` reply)
//! counts as an error. Prints one JSON line:
//! `{"op":…,"conns":…,"seconds":…,"requests":…,"errors":…,"rps":…,"p50_us":…,"p99_us":…,"p999_us":…}`.
//!
//! With `MEMLOAD_RATE=N` the load is open-loop: N round trips a second, evenly spaced, dealt to
//! the connections in turn by a pacing thread (tokio's timer ticks in milliseconds, too coarse
//! for gaps of tens of microseconds). A round trip whose time came while its connection still
//! waited for the previous reply counts from when it was due, not from when it could be sent: a
//! stall counts in every request it held up (no coordinated omission), as a service sending at a
//! steady rate would see it. Without it (the default) each connection sends its next request as
//! soon as the last reply arrived: as fast as the machine goes, so any CPU taken from the proxy
//! or the servers shows as latency. With a rate the JSON line also carries `"rate":N`.
//!
//! With `MEMLOAD_TOGGLE=PID` (and `MEMLOAD_SLICE=S`, 1 s by default) the run is cut into slices of
//! S seconds, and process PID is stopped (SIGSTOP) in the slices 0, 3, 4, 7, 8… and running
//! (SIGCONT) in 1, 2, 5, 6… (ABBA: a drift of the machine hits both alike), and left running at
//! the end. Each request counts in the slice it was due in; the JSON line then also carries each
//! slice's p99, `"paused_p99s":[…]` and `"running_p99s":[…]`: what the process costs the load,
//! told apart from the machine's drift by slices seconds apart instead of runs minutes apart.
//!
//! With `MEMLOAD_KEYS_FILE=PATH` the keys are the file's, one a line, each optionally followed by a
//! space and a group's name (the server a script found it on, say); KEYS is then the file's count.
//! With groups and a one-key op, the JSON line also carries each group's figures,
//! `"groups":{"NAME":{"requests":…,"errors":…,"p50_us":…,"p99_us":…},…}`: how the keys of one
//! server fared beside the others' on the same connections. With `MEMLOAD_GROUP_CONNS=1` each
//! connection carries one group's keys only, the connections dealt to the groups in proportion to
//! their keys (at least one each): a client whose connections to one server's keys wait does not
//! hold up the others' (as clients with a connection per shard, or a multiplexing client, see it).
//!
//! With `MEMLOAD_TLS_CA=ca.pem` every connection is a TLS one, the server's certificate checked
//! against that CA for the name `127.0.0.1` (connections are made before the timed loop, so the
//! handshakes are not in the figures).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::either::Either;

/// A connection: plain, or TLS when `MEMLOAD_TLS_CA` names a CA (tokio-util's `Either` reads and
/// writes whichever it holds).
type Conn = Either<TcpStream, Box<tokio_rustls::client::TlsStream<TcpStream>>>;

/// Connects to `addr`, with a TLS handshake when `tls` is given.
async fn open(addr: &str, tls: Option<&tokio_rustls::TlsConnector>) -> Conn {
    let s = TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    match tls {
        None => Either::Left(s),
        Some(c) => {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            Either::Right(Box::new(c.connect(name, s).await.expect("TLS handshake")))
        }
    }
}

/// The TLS client `MEMLOAD_TLS_CA` asks for, if any.
fn tls_connector() -> Option<tokio_rustls::TlsConnector> {
    use rustls::pki_types::pem::PemObject;
    let ca = std::env::var_os("MEMLOAD_TLS_CA")?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(&ca).expect("MEMLOAD_TLS_CA") {
        roots
            .add(c.expect("a CA certificate"))
            .expect("a usable CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Which protocol a run speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    Memcache,
    /// RESP2, expecting this many replies per request sent.
    Redis(usize),
}

/// Reads one whole reply (for Redis, as many replies as were pipelined); false if it was an error.
async fn read_reply(
    s: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
    wire: Wire,
) -> std::io::Result<bool> {
    buf.clear();
    let mut chunk = [0u8; 16 << 10];
    loop {
        match wire {
            Wire::Memcache if complete(buf) => {
                return Ok(!buf.starts_with(b"SERVER_ERROR") && !buf.starts_with(b"CLIENT_ERROR"));
            }
            Wire::Redis(replies) => {
                if let Some(ok) = resp_complete(buf, replies) {
                    return Ok(ok);
                }
            }
            Wire::Memcache => {}
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn complete(buf: &[u8]) -> bool {
    let mut at = 0;
    loop {
        let Some(nl) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let line = &buf[at..at + nl];
        if let Some(rest) = line.strip_prefix(b"VALUE ") {
            let len: usize = std::str::from_utf8(rest)
                .ok()
                .and_then(|r| r.split(' ').nth(2))
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            at += nl + 2 + len + 2;
            if at > buf.len() {
                return false;
            }
        } else {
            return at + nl + 2 == buf.len();
        }
    }
}

/// Whether `buf` holds `replies` whole RESP2 replies (then `Some(no error among them)`), else `None`.
fn resp_complete(buf: &[u8], replies: usize) -> Option<bool> {
    let mut at = 0;
    let mut ok = true;
    for _ in 0..replies {
        at = resp_value(buf, at, &mut ok)?;
    }
    (at == buf.len()).then_some(ok)
}

/// The end of the RESP2 value starting at `at`, or `None` when it is not all in `buf`.
fn resp_value(buf: &[u8], at: usize, ok: &mut bool) -> Option<usize> {
    let nl = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let line = &buf[at + 1..nl];
    let number = || -> i64 {
        std::str::from_utf8(line)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1)
    };
    match buf[at] {
        b'-' => {
            *ok = false;
            Some(nl + 2)
        }
        b'$' => match number() {
            n if n < 0 => Some(nl + 2),
            n => {
                let end = nl + 2 + n as usize + 2;
                (end <= buf.len()).then_some(end)
            }
        },
        b'*' => {
            let mut end = nl + 2;
            for _ in 0..number().max(0) {
                end = resp_value(buf, end, ok)?;
            }
            Some(end)
        }
        _ => Some(nl + 2),
    }
}

/// A RESP2 command.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut r = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        r.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        r.extend_from_slice(a);
        r.extend_from_slice(b"\r\n");
    }
    r
}

/// The pacing thread: deals the due times of `rate` round trips a second, evenly spaced from
/// `started`, to the connections in turn, until `stop`. It sleeps until the next is due and then
/// deals every one due within the next 20 µs, so a high rate does not cost a wake-up a request.
fn pace(
    started: Instant,
    rate: f64,
    connections: &[tokio::sync::mpsc::UnboundedSender<Instant>],
    stop: &AtomicBool,
) {
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut k: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        let next = started + period * k;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        let horizon = Instant::now() + Duration::from_micros(20);
        loop {
            let due = started + period * k;
            if due > horizon {
                break;
            }
            // A connection that has stopped no longer listens: nothing to do.
            let _ = connections[k as usize % connections.len()].send(due);
            k += 1;
        }
    }
}

/// Whether slice `k` of a toggled run has the process stopped (ABBA: stopped, running, running,
/// stopped, …).
fn stopped_in(k: u32) -> bool {
    matches!(k % 4, 0 | 3)
}

/// The requests each of `conns` connections sends, by index: every one (in turn from a different
/// place), or with `grouped` only its group's, the connections dealt to the groups in proportion to
/// their requests, at least one each.
fn conn_requests(
    groups: &[u8],
    ngroups: usize,
    conns: usize,
    grouped: bool,
    nrequests: usize,
) -> Vec<Arc<Vec<usize>>> {
    if !grouped || ngroups < 2 {
        let all = Arc::new((0..nrequests).collect::<Vec<_>>());
        return (0..conns).map(|_| Arc::clone(&all)).collect();
    }
    assert!(
        conns >= ngroups,
        "MEMLOAD_GROUP_CONNS: fewer connections than groups"
    );
    let members: Vec<Arc<Vec<usize>>> = (0..ngroups)
        .map(|g| {
            Arc::new(
                (0..nrequests)
                    .filter(|&i| usize::from(groups[i]) == g)
                    .collect(),
            )
        })
        .collect();
    // Largest remainder, with at least one connection a group.
    let mut share: Vec<usize> = members
        .iter()
        .map(|m| (m.len() * conns / nrequests).max(1))
        .collect();
    while share.iter().sum::<usize>() > conns {
        let g = (0..ngroups).max_by_key(|&g| share[g]).expect("groups");
        share[g] -= 1;
    }
    while share.iter().sum::<usize>() < conns {
        let g = (0..ngroups)
            .max_by_key(|&g| (members[g].len() * conns).saturating_sub(share[g] * nrequests))
            .expect("groups");
        share[g] += 1;
    }
    (0..ngroups)
        .flat_map(|g| std::iter::repeat_n(Arc::clone(&members[g]), share[g]))
        .collect()
}

/// `MEMLOAD_KEYS_FILE`'s keys, each line's group (an index into the names, in order of first
/// appearance; 0 for a line without one) and the groups' names.
fn keys_file(path: &std::ffi::OsStr) -> (Vec<String>, Vec<u8>, Vec<String>) {
    let text = std::fs::read_to_string(path).expect("MEMLOAD_KEYS_FILE");
    let (mut keys, mut groups, mut names) = (Vec::new(), Vec::new(), Vec::<String>::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (key, group) = line.split_once(' ').unwrap_or((line, ""));
        let g = match names.iter().position(|n| n == group) {
            Some(g) => g,
            None => {
                names.push(group.to_owned());
                names.len() - 1
            }
        };
        keys.push(key.to_owned());
        groups.push(u8::try_from(g).expect("at most 256 groups"));
    }
    assert!(!keys.is_empty(), "MEMLOAD_KEYS_FILE has no keys");
    (keys, groups, names)
}

/// `MEMLOAD_TOGGLE`'s thread: stops and continues `pid` at each slice's start, then continues it.
fn toggle(pid: rustix::process::Pid, started: Instant, slice: Duration, stop: &AtomicBool) {
    use rustix::process::{kill_process, Signal};
    let mut k: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        let signal = if stopped_in(k) {
            Signal::STOP
        } else {
            Signal::CONT
        };
        // A process that has exited cannot be toggled: the slices still count.
        let _ = kill_process(pid, signal);
        k += 1;
        let next = started + slice * k;
        while !stop.load(Ordering::Relaxed) && Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
        }
    }
    let _ = kill_process(pid, Signal::CONT);
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: memload ADDR CONNS SECONDS get|set|mget10|load [KEYS] [VALUE_BYTES]");
        std::process::exit(2);
    }
    let addr = args[1].clone();
    let conns: usize = args[2].parse().expect("CONNS");
    let seconds: f64 = args[3].parse().expect("SECONDS");
    let op = args[4].clone();
    let mut nkeys: usize = args.get(5).map_or(10_000, |k| k.parse().expect("KEYS"));
    let vlen: usize = args.get(6).map_or(100, |v| v.parse().expect("VALUE_BYTES"));
    let (keys, key_groups, group_names) = match std::env::var_os("MEMLOAD_KEYS_FILE") {
        None => (
            (0..nkeys).map(|i| format!("memload:{i:08}")).collect(),
            Vec::new(),
            Vec::new(),
        ),
        Some(path) => keys_file(&path),
    };
    if std::env::var_os("MEMLOAD_KEYS_FILE").is_some() {
        nkeys = keys.len();
    }
    let keys: Arc<Vec<String>> = Arc::new(keys);
    let value = vec![b'v'; vlen];

    let tls = tls_connector();
    // `connect`/`redis-connect`: a `get` on a new connection each time (with TLS, a handshake a
    // request; rustls resumes sessions, as the proxy's clients would).
    let reconnect = op == "connect" || op == "redis-connect";
    let label = op.clone();
    let op = match op.as_str() {
        "connect" => "get".to_owned(),
        "redis-connect" => "redis-get".to_owned(),
        _ => op,
    };
    let wire = match op.as_str() {
        "redis-get-p16" => Wire::Redis(16),
        "redis-multi-set" => Wire::Redis(3),
        o if o.starts_with("redis-") => Wire::Redis(1),
        _ => Wire::Memcache,
    };
    // How many requests one round trip carries (a transaction is one).
    let per_trip = match (wire, op.as_str()) {
        (_, "redis-multi-set") => 1,
        (Wire::Redis(n), _) => n,
        (Wire::Memcache, _) => 1,
    };
    // One hash tag: every list on one server, so a client stays on its connection of its own.
    let list = |i: usize| format!("{{memload}}:list:{}", i % 64);
    if op == "redis-blmove" {
        let mut s = open(&addr, tls.as_ref()).await;
        let mut buf = Vec::new();
        for i in 0..64 {
            let req = resp(&[b"RPUSH", list(i).as_bytes(), b"a", b"b", b"c", b"d"]);
            s.write_all(&req).await.expect("write");
            assert!(
                read_reply(&mut s, &mut buf, wire).await.expect("read"),
                "rpush failed"
            );
        }
    }
    if op == "load" || op == "redis-load" {
        let mut s = open(&addr, tls.as_ref()).await;
        let mut buf = Vec::new();
        for k in keys.iter() {
            let req = if wire == Wire::Memcache {
                let mut req = format!("set {k} 0 0 {vlen}\r\n").into_bytes();
                req.extend_from_slice(&value);
                req.extend_from_slice(b"\r\n");
                req
            } else {
                resp(&[b"SET", k.as_bytes(), &value])
            };
            s.write_all(&req).await.expect("write");
            assert!(
                read_reply(&mut s, &mut buf, wire).await.expect("read"),
                "set failed"
            );
        }
        return;
    }
    // The ten keys of the `i`th multi-key request.
    let ten = |i: usize| (0..10).map(move |j| (i * 7 + j * 997) % nkeys);

    // Requests are made before the clock starts: the loop only cycles through them.
    let requests: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..nkeys)
            .map(|i| match op.as_str() {
                "get" => format!("get {}\r\n", keys[i]).into_bytes(),
                "set" => {
                    let mut r = format!("set {} 0 0 {vlen}\r\n", keys[i]).into_bytes();
                    r.extend_from_slice(&value);
                    r.extend_from_slice(b"\r\n");
                    r
                }
                "mget10" => {
                    let mut r = String::from("get");
                    for k in ten(i) {
                        r.push(' ');
                        r.push_str(&keys[k]);
                    }
                    r.push_str("\r\n");
                    r.into_bytes()
                }
                "redis-get" => resp(&[b"GET", keys[i].as_bytes()]),
                "redis-set" => resp(&[b"SET", keys[i].as_bytes(), &value]),
                "redis-mget10" => {
                    let mut args: Vec<&[u8]> = vec![b"MGET"];
                    args.extend(ten(i).map(|k| keys[k].as_bytes()));
                    resp(&args)
                }
                "redis-mset10" => {
                    let mut args: Vec<&[u8]> = vec![b"MSET"];
                    for k in ten(i) {
                        args.push(keys[k].as_bytes());
                        args.push(&value);
                    }
                    resp(&args)
                }
                "redis-multi-set" => [
                    resp(&[b"MULTI"]),
                    resp(&[b"SET", keys[i].as_bytes(), &value]),
                    resp(&[b"EXEC"]),
                ]
                .concat(),
                "redis-blmove" => {
                    let l = list(i);
                    resp(&[
                        b"BLMOVE",
                        l.as_bytes(),
                        l.as_bytes(),
                        b"LEFT",
                        b"RIGHT",
                        b"0",
                    ])
                }
                "redis-get-p16" => (0..16)
                    .flat_map(|j| resp(&[b"GET", keys[(i + j * 613) % nkeys].as_bytes()]))
                    .collect(),
                other => panic!("unknown op {other}"),
            })
            .collect(),
    );
    // Every connection (and its TLS handshake) before the clock starts.
    let mut opened = Vec::with_capacity(conns);
    for _ in 0..conns {
        opened.push(open(&addr, tls.as_ref()).await);
    }
    // Empty is unset: scripts pass `MEMLOAD_RATE=$LOAD_RATE` whether or not a rate was asked for.
    let rate: Option<f64> = std::env::var("MEMLOAD_RATE")
        .ok()
        .filter(|r| !r.is_empty())
        .map(|r| r.parse().expect("MEMLOAD_RATE: round trips a second"));
    let toggled: Option<rustix::process::Pid> = std::env::var("MEMLOAD_TOGGLE").ok().map(|p| {
        rustix::process::Pid::from_raw(p.parse().expect("MEMLOAD_TOGGLE: a process id"))
            .expect("MEMLOAD_TOGGLE: a process id above 0")
    });
    let slice = Duration::from_secs_f64(
        std::env::var("MEMLOAD_SLICE").map_or(1.0, |s| s.parse().expect("MEMLOAD_SLICE: seconds")),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let toggler = toggled.map(|pid| {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || toggle(pid, started, slice, &stop))
    });
    // Open loop: each connection takes the times its round trips are due from a channel.
    let mut schedules: Vec<Option<tokio::sync::mpsc::UnboundedReceiver<Instant>>> =
        (0..conns).map(|_| None).collect();
    if let Some(rate) = rate {
        let mut senders = Vec::with_capacity(conns);
        for slot in &mut schedules {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            senders.push(tx);
            *slot = Some(rx);
        }
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || pace(started, rate, &senders, &stop));
    }
    let mut tasks = Vec::new();
    // Each request's key group, for one-key ops (a multi-key request has several).
    let one_key = matches!(op.as_str(), "get" | "set" | "redis-get" | "redis-set");
    let groups: Arc<Vec<u8>> = Arc::new(if one_key { key_groups } else { Vec::new() });
    let grouped = one_key && std::env::var("MEMLOAD_GROUP_CONNS").is_ok_and(|v| v == "1");
    let owned = conn_requests(&groups, group_names.len(), conns, grouped, requests.len());
    for ((c, mut s), mut schedule) in opened.into_iter().enumerate().zip(schedules) {
        let requests = Arc::clone(&requests);
        let mine = Arc::clone(&owned[c]);
        let groups = Arc::clone(&groups);
        let stop = Arc::clone(&stop);
        let (addr, tls) = (addr.clone(), tls.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = Vec::with_capacity(4096);
            let mut lat = Vec::with_capacity(1 << 16);
            let mut errors = 0u64;
            let mut i = c * 7919;
            let mut last_reply = started;
            while !stop.load(Ordering::Relaxed) {
                let at = mine[i % mine.len()];
                let req = &requests[at];
                i += 1;
                let t = match schedule.as_mut() {
                    None => Instant::now(),
                    Some(schedule) => match schedule.recv().await {
                        None => break,
                        // Due while the last round trip was still out: the wait is the system's.
                        Some(due) if due < last_reply => due,
                        // Due while idle: the pacer's wake-up is not the system's.
                        Some(_) => Instant::now(),
                    },
                };
                if reconnect {
                    s = open(&addr, tls.as_ref()).await;
                }
                s.write_all(req).await.expect("write");
                let answered = match read_reply(&mut s, &mut buf, wire).await {
                    Ok(true) => true,
                    Ok(false) => {
                        errors += 1;
                        false
                    }
                    Err(e) => panic!("connection failed: {e}"),
                };
                last_reply = Instant::now();
                let k = ((t - started).as_secs_f64() / slice.as_secs_f64()) as u32;
                let group = groups.get(at).copied().unwrap_or(0);
                lat.push((
                    u32::try_from((last_reply - t).as_micros()).unwrap_or(u32::MAX),
                    k,
                    group,
                    !answered,
                ));
            }
            (lat, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.expect("task");
        samples.extend(lat);
        errors += e;
    }
    if let Some(t) = toggler {
        t.join().expect("toggle thread");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut all: Vec<u32> = samples.iter().map(|&(l, ..)| l).collect();
    all.sort_unstable();
    let rate = rate.map_or(String::new(), |r| format!("\"rate\":{r},"));
    let slices = if toggled.is_some() {
        // Whole slices of the run only: one cut short by its end is left out (so are the replies
        // that came in after it).
        let whole = (seconds / slice.as_secs_f64()) as u32;
        let mut by_slice: Vec<Vec<u32>> = vec![Vec::new(); whole as usize];
        for &(l, k, ..) in &samples {
            if let Some(v) = by_slice.get_mut(k as usize) {
                v.push(l);
            }
        }
        let (mut paused, mut running) = (Vec::new(), Vec::new());
        for (k, mut v) in by_slice.into_iter().enumerate() {
            v.sort_unstable();
            let p99 = percentile(&v, 0.99);
            if stopped_in(k as u32) {
                paused.push(p99);
            } else {
                running.push(p99);
            }
        }
        format!(",\"paused_p99s\":{paused:?},\"running_p99s\":{running:?}")
    } else {
        String::new()
    };
    let by_group = if groups.is_empty() {
        String::new()
    } else {
        let parts: Vec<String> = group_names
            .iter()
            .enumerate()
            .map(|(g, name)| {
                let mut v: Vec<u32> = samples
                    .iter()
                    .filter(|s| usize::from(s.2) == g)
                    .map(|s| s.0)
                    .collect();
                let errors = samples
                    .iter()
                    .filter(|s| usize::from(s.2) == g && s.3)
                    .count();
                v.sort_unstable();
                format!(
                    "\"{name}\":{{\"requests\":{},\"errors\":{errors},\"p50_us\":{},\"p99_us\":{}}}",
                    v.len(),
                    percentile(&v, 0.50),
                    percentile(&v, 0.99)
                )
            })
            .collect();
        format!(",\"groups\":{{{}}}", parts.join(","))
    };
    println!(
        "{{{rate}\"op\":\"{label}\",\"conns\":{conns},\"seconds\":{elapsed:.3},\"requests\":{},\"errors\":{errors},\"rps\":{:.1},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{}{slices}{by_group}}}",
        all.len() * per_trip,
        (all.len() * per_trip) as f64 / elapsed,
        percentile(&all, 0.50),
        percentile(&all, 0.99),
        percentile(&all, 0.999),
    );
}
