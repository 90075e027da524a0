//! `shardring migrate` end to end on Redis pools: every data type with and without TTLs, two proxies
//! under a read/write load for the whole migration, then every key read back through both. A
//! hash-tagged pool with `redis_auth` losing a server (4 → 3, MIGRATE), and a plain pool on database
//! 2 gaining one (4 → 5, the default DUMP/RESTORE).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::migrate_fleet::{join_loads, Fleet};
use test_support::free_port;
use test_support::redis::RedisServer;
use test_support::redis_cluster::{RedisCluster, Role};

const KEYS: usize = 60_000;

/// A RESP reply.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    fn text(&self) -> String {
        match self {
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        }
    }

    fn items(&self) -> Vec<String> {
        match self {
            Reply::Array(Some(a)) => a.iter().map(Reply::text).collect(),
            other => panic!("not an array: {other:?}"),
        }
    }

    fn int(&self) -> i64 {
        match self {
            Reply::Int(n) => *n,
            other => panic!("not an integer: {other:?}"),
        }
    }
}

/// A blocking RESP2 client.
struct Redis {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Redis {
    fn connect(addr: &str, auth: Option<&str>) -> Redis {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Redis {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        };
        if let Some(pw) = auth {
            assert_eq!(c.call(&["AUTH", pw]), Reply::Status("OK".into()));
        }
        c
    }

    fn encode(args: &[&str], out: &mut Vec<u8>) {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }

    fn read(&mut self) -> Reply {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let (kind, rest) = line.split_at(1);
        let rest = rest.trim_end();
        match kind {
            "+" => Reply::Status(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                Reply::Bulk(Some(b))
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Array(None);
                }
                Reply::Array(Some((0..n).map(|_| self.read()).collect()))
            }
            _ => panic!("not RESP: {line:?}"),
        }
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        let mut out = Vec::new();
        Redis::encode(args, &mut out);
        self.w.write_all(&out).unwrap();
        self.read()
    }

    fn pipeline(&mut self, cmds: &[Vec<String>]) -> Vec<Reply> {
        let mut out = Vec::new();
        for c in cmds {
            let args: Vec<&str> = c.iter().map(String::as_str).collect();
            Redis::encode(&args, &mut out);
        }
        self.w.write_all(&out).unwrap();
        cmds.iter().map(|_| self.read()).collect()
    }
}

/// What a key holds, as the test models it.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Hash(BTreeMap<String, String>),
    List(Vec<String>),
    Set(BTreeSet<String>),
    Zset(BTreeMap<String, i64>),
    /// A stream: its entries' `f` fields, in order.
    Stream(Vec<String>),
}

/// How the pool names keys.
#[derive(Clone, Copy)]
struct Keys {
    tagged: bool,
}

impl Keys {
    fn key(self, i: usize) -> String {
        if self.tagged {
            format!("{{acct{}}}:k{i}", i / 4)
        } else {
            format!("obj:{i}:data")
        }
    }
}

/// Key `i`'s value as filled.
fn filled(i: usize) -> Value {
    match i % 6 {
        0 => Value::Str(format!("s{i}")),
        1 => Value::Hash([("a".to_string(), format!("{i}")), ("b".into(), "x".into())].into()),
        2 => Value::List(vec![format!("{i}"), "y".into()]),
        3 => Value::Set([format!("m{i}"), "z".into()].into()),
        4 => Value::Zset([(format!("m{i}"), i as i64), ("z".into(), 1)].into()),
        _ => Value::Stream(vec![format!("{i}")]),
    }
}

/// Whether key `i` has a TTL (an hour from the fill).
fn has_ttl(i: usize) -> bool {
    i % 4 == 1
}

/// The commands that store `value` at `key`.
fn store(key: &str, value: &Value) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let mut cmds = vec![s(&["DEL", key])];
    match value {
        Value::Str(v) => cmds.push(s(&["SET", key, v])),
        Value::Hash(m) => {
            let mut c = s(&["HSET", key]);
            for (f, v) in m {
                c.push(f.clone());
                c.push(v.clone());
            }
            cmds.push(c);
        }
        Value::List(l) => {
            let mut c = s(&["RPUSH", key]);
            c.extend(l.iter().cloned());
            cmds.push(c);
        }
        Value::Set(m) => {
            let mut c = s(&["SADD", key]);
            c.extend(m.iter().cloned());
            cmds.push(c);
        }
        Value::Zset(m) => {
            let mut c = s(&["ZADD", key]);
            for (member, score) in m {
                c.push(score.to_string());
                c.push(member.clone());
            }
            cmds.push(c);
        }
        Value::Stream(fs) => {
            for f in fs {
                cmds.push(s(&["XADD", key, "*", "f", f]));
            }
        }
    }
    cmds
}

/// The commands that read `key` of kind `i % 6` back, and how their replies become a [`Value`].
fn read_cmd(key: &str, i: usize) -> Vec<String> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    match i % 6 {
        0 => s(&["GET", key]),
        1 => s(&["HGETALL", key]),
        2 => s(&["LRANGE", key, "0", "-1"]),
        3 => s(&["SMEMBERS", key]),
        4 => s(&["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        _ => s(&["XRANGE", key, "-", "+"]),
    }
}

/// A read's reply as a value; `None` when the key is missing.
fn parse(reply: &Reply, i: usize) -> Option<Value> {
    match i % 6 {
        0 => match reply {
            Reply::Bulk(None) => None,
            r => Some(Value::Str(r.text())),
        },
        kind => {
            let items = match reply {
                Reply::Array(Some(a)) if a.is_empty() => return None,
                Reply::Array(Some(a)) => a.clone(),
                other => panic!("key {i}: {other:?}"),
            };
            Some(match kind {
                1 => Value::Hash(
                    items
                        .chunks(2)
                        .map(|p| (p[0].text(), p[1].text()))
                        .collect(),
                ),
                2 => Value::List(items.iter().map(Reply::text).collect()),
                3 => Value::Set(items.iter().map(Reply::text).collect()),
                4 => Value::Zset(
                    items
                        .chunks(2)
                        .map(|p| (p[0].text(), p[1].text().parse().unwrap()))
                        .collect(),
                ),
                _ => Value::Stream(
                    items
                        .iter()
                        .map(|entry| match entry {
                            Reply::Array(Some(e)) if e.len() == 2 => {
                                e[1].items().get(1).cloned().unwrap_or_default()
                            }
                            other => panic!("key {i}: a stream entry {other:?}"),
                        })
                        .collect(),
                ),
            })
        }
    }
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Stores every key through `addr`; returns when the TTLs were set (ms).
fn fill(addr: &str, auth: Option<&str>, keys: Keys) -> i64 {
    let mut c = Redis::connect(addr, auth);
    let at = unix_ms();
    for start in (0..KEYS).step_by(500) {
        let mut cmds = Vec::new();
        for i in start..(start + 500).min(KEYS) {
            let k = keys.key(i);
            cmds.extend(store(&k, &filled(i)));
            if has_ttl(i) {
                // An absolute expiry, so each key's is known exactly however long the fill takes.
                cmds.push(vec!["PEXPIREAT".into(), k, (at + 3_600_000).to_string()]);
            }
        }
        for r in c.pipeline(&cmds) {
            assert!(!matches!(r, Reply::Error(_)), "{r:?}");
        }
    }
    at
}

/// Keys the load deletes.
fn deleted_by_load(i: usize) -> bool {
    i % 1000 == 7
}

/// Updates key `i` in place (the kind of change dual writes must not lose) and the model with it.
fn update(c: &mut Redis, key: &str, i: usize, gen: u64, model: &mut Value) {
    let g = gen.to_string();
    let r = match (i % 6, &mut *model) {
        (0, Value::Str(v)) => {
            v.push('+');
            c.call(&["APPEND", key, "+"])
        }
        (1, Value::Hash(m)) => {
            let n = m.get("a").and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) + 1;
            m.insert("a".into(), n.to_string());
            c.call(&["HINCRBY", key, "a", "1"])
        }
        (2, Value::List(l)) => {
            l.push(g.clone());
            c.call(&["RPUSH", key, &g])
        }
        (3, Value::Set(m)) => {
            m.insert(format!("g{g}"));
            c.call(&["SADD", key, &format!("g{g}")])
        }
        (4, Value::Zset(m)) => {
            *m.entry("z".into()).or_insert(0) += 2;
            c.call(&["ZINCRBY", key, "2", "z"])
        }
        (_, Value::Stream(fs)) => {
            fs.push(g.clone());
            c.call(&["XADD", key, "*", "f", &g])
        }
        (kind, m) => panic!("kind {kind} model {m:?}"),
    };
    assert!(!matches!(r, Reply::Error(_)), "{key}: {r:?}");
}

type Expected = HashMap<usize, Option<Value>>;

/// Reads and updates the keys `i % 2 == part` through `addr` until `stop`; returns what it
/// expects of the keys it changed, and its misses and stale reads (a read that did not give the
/// key's last acknowledged write).
fn load(
    addr: String,
    other: String,
    auth: Option<String>,
    keys: Keys,
    part: usize,
    stop: Arc<AtomicBool>,
) -> (Expected, Vec<String>) {
    let mut c = Redis::connect(&addr, auth.as_deref());
    // Reads go through either proxy: across the cut-over, one may serve the new membership while
    // the other still serves the old, and a write through one must be read through the other.
    let mut o = Redis::connect(&other, auth.as_deref());
    let mut expected = Expected::new();
    let mut misses = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ (part as u64 + 1);
    let mut gen = 0;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = ((x >> 8) as usize % (KEYS / 2)) * 2 + part;
        let k = keys.key(i);
        if deleted_by_load(i) {
            if let std::collections::hash_map::Entry::Vacant(e) = expected.entry(i) {
                assert_eq!(c.call(&["DEL", &k]), Reply::Int(1), "{k}");
                e.insert(None);
            }
            continue;
        }
        if x % 100 < 70 {
            let reader = if x.is_multiple_of(2) { &mut c } else { &mut o };
            let r = reader.pipeline(&[read_cmd(&k, i)]).remove(0);
            // This thread alone writes its keys: a read must give its last acknowledged write.
            let want = expected.get(&i).cloned().unwrap_or_else(|| Some(filled(i)));
            match parse(&r, i) {
                None => misses.push(k),
                got if got != want => misses.push(format!("{k}: stale: {got:?}, wanted {want:?}")),
                _ => {}
            }
        } else {
            gen += 1;
            let model = expected.entry(i).or_insert_with(|| Some(filled(i)));
            if let Some(m) = model {
                update(&mut c, &k, i, gen, m);
                // Read back at once through the other proxy.
                let r = o.pipeline(&[read_cmd(&k, i)]).remove(0);
                if parse(&r, i).as_ref() != Some(&*m) {
                    misses.push(format!(
                        "{k}: stale through the other proxy: {:?}",
                        parse(&r, i)
                    ));
                }
            }
        }
    }
    (expected, misses)
}

/// Every key read back through `addr`: its latest value and TTL (±2 s).
fn check_all(addr: &str, auth: Option<&str>, keys: Keys, expected: &Expected, filled_at: i64) {
    let mut c = Redis::connect(addr, auth);
    let mut wrong = Vec::new();
    for start in (0..KEYS).step_by(500) {
        let range: Vec<usize> = (start..(start + 500).min(KEYS)).collect();
        let mut cmds = Vec::new();
        for &i in &range {
            cmds.push(read_cmd(&keys.key(i), i));
            cmds.push(vec!["PTTL".into(), keys.key(i)]);
        }
        let replies = c.pipeline(&cmds);
        let now = unix_ms();
        for (n, &i) in range.iter().enumerate() {
            let got = parse(&replies[2 * n], i);
            let want = expected.get(&i).cloned().unwrap_or_else(|| Some(filled(i)));
            if got != want {
                wrong.push(format!("{}: {got:?}, wanted {want:?}", keys.key(i)));
                continue;
            }
            let pttl = replies[2 * n + 1].int();
            let ok = match (want.is_some(), has_ttl(i)) {
                (false, _) => pttl == -2,
                (true, false) => pttl == -1,
                (true, true) => (pttl - (filled_at + 3_600_000 - now)).abs() <= 2000,
            };
            if !ok {
                wrong.push(format!("{}: PTTL {pttl}", keys.key(i)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} keys wrong, e.g.:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(10)].join("\n")
    );
}

/// The pool file of a proxy on `listen` over `servers`.
fn yaml(listen: u16, servers: &[&RedisServer], extra: &str) -> String {
    let mut y = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  redis: true\n  timeout: 3000\n{extra}  servers:\n"
    );
    for s in servers {
        y.push_str(&format!("   - {}:1 redis-{}\n", s.addr, s.port));
    }
    y
}

/// The migration of a Redis pool from `now` to `next` under load.
fn migrate_under_load(
    servers: &[RedisServer],
    now: &[usize],
    next: &[usize],
    extra: &str,
    auth: Option<&str>,
    keys: Keys,
    flags: &[&str],
) {
    let now: Vec<&RedisServer> = now.iter().map(|&i| &servers[i]).collect();
    let next: Vec<&RedisServer> = next.iter().map(|&i| &servers[i]).collect();
    let left: Vec<&RedisServer> = now
        .iter()
        .filter(|s| !next.iter().any(|n| n.addr == s.addr))
        .copied()
        .collect();
    let next_file = yaml(free_port(), &next, extra);
    let stdout = migrate_to(&now, &next_file, &left, extra, auth, keys, flags);
    assert!(stdout.contains("cut over: every proxy (2)"), "{stdout}");
}

/// The migration of a Redis pool on `now` to the pool of file `next` under load, checked: every
/// key read back through both proxies with its value and TTL, and no request reaching a server
/// that `left` after the cut-over. Returns `migrate`'s output.
fn migrate_to(
    now: &[&RedisServer],
    next: &str,
    left: &[&RedisServer],
    extra: &str,
    auth: Option<&str>,
    keys: Keys,
    flags: &[&str],
) -> String {
    let mut fleet = Fleet::start(|l| yaml(l, now, extra), &[]);
    // A second between the proxies' reloads: reads through the one that did not switch yet must
    // see the writes through the one that did.
    fleet.reload_gap = Some(Duration::from_secs(1));
    let filled_at = fill(&fleet.addr(0), auth, keys);
    fleet.plan(next);
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (0..2)
        .map(|p| {
            let (addr, other) = (fleet.addr(p), fleet.addr(1 - p));
            let (stop, auth) = (Arc::clone(&stop), auth.map(str::to_owned));
            std::thread::spawn(move || load(addr, other, auth, keys, p, stop))
        })
        .collect();
    let out = fleet.migrate(flags).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "migrate failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The plan and the copy's figures, for `--nocapture`.
    eprintln!("{stdout}");
    let calls = |c: &mut Redis| -> i64 {
        let info = c.call(&["INFO", "stats"]).text();
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    let mut watchers: Vec<Redis> = left.iter().map(|s| Redis::connect(&s.addr, auth)).collect();
    let before: Vec<i64> = watchers.iter_mut().map(calls).collect();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let expected: Expected = join_loads(loads);
    let after: Vec<i64> = watchers.iter_mut().map(calls).collect();
    // Only our own INFO between the two readings.
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            a - b,
            1,
            "a server that left got requests after the cut-over"
        );
    }
    for p in 0..2 {
        check_all(&fleet.addr(p), auth, keys, &expected, filled_at);
    }
    stdout
}

#[test]
fn a_hash_tagged_pool_with_a_password_loses_a_server_under_load_by_migrate() {
    let Some(servers) = (0..4)
        .map(|_| RedisServer::start(&["--requirepass", "s3cret"]))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    migrate_under_load(
        &servers,
        &[0, 1, 2, 3],
        &[0, 1, 2],
        "  hash_tag: \"{}\"\n  redis_auth: s3cret\n",
        Some("s3cret"),
        Keys { tagged: true },
        &["--transfer", "migrate"],
    );
}

#[test]
fn a_pool_on_database_2_gains_a_server_under_load_by_the_default_dump_and_restore() {
    let Some(servers) = (0..5)
        .map(|_| RedisServer::start(&[]))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    migrate_under_load(
        &servers,
        &[0, 1, 2, 3],
        &[0, 1, 2, 3, 4],
        "  redis_db: 2\n",
        None,
        Keys { tagged: false },
        &[],
    );
}

#[test]
fn a_ketama_pool_moves_onto_a_redis_cluster_under_load_and_every_key_reads_back() {
    let Some(servers) = (0..4)
        .map(|_| RedisServer::start(&[]))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let Some(cluster) = RedisCluster::start(3, 1) else {
        return;
    };
    let now: Vec<&RedisServer> = servers.iter().collect();
    // The next file: the pool's servers are the cluster's seeds (one is enough), marked.
    let next = format!(
        "alpha:  # shardring: redis-cluster\n  listen: 127.0.0.1:{}\n  redis: true\n  timeout: 3000\n  servers:\n   - {}:1\n",
        free_port(),
        cluster.seeds()[0]
    );
    let stdout = migrate_to(
        &now,
        &next,
        &now,
        "",
        None,
        Keys { tagged: false },
        &["--all-keys", "--rate", "20000", "--delete-moved"],
    );
    // --delete-moved emptied the old servers.
    for s in &servers {
        assert_eq!(
            Redis::connect(&s.addr, None).call(&["DBSIZE"]).int(),
            0,
            "{}",
            s.addr
        );
    }
    assert!(
        stdout.contains("a Redis Cluster of 3 masters (16384 slots)"),
        "{stdout}"
    );
    assert!(stdout.contains("cut over: every proxy (2)"), "{stdout}");
    // Every key on the cluster's masters, and nothing else: the keys the load deleted are gone.
    let present = (0..KEYS).filter(|&i| !deleted_by_load(i)).count() as i64;
    let on_cluster: i64 = cluster
        .seeds()
        .iter()
        .filter(|a| cluster.role(a) == Some(Role::Master))
        .map(|a| Redis::connect(a, None).call(&["DBSIZE"]).int())
        .sum();
    assert!(
        (present..=KEYS as i64).contains(&on_cluster),
        "{on_cluster} keys on the cluster, {present} to {KEYS} expected (as many as the load did not delete)"
    );
}
