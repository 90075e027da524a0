//! The commands across every server of a redis pool (`SCAN`, `KEYS`, `RANDOMKEY`, `FLUSHDB`,
//! `FLUSHALL`, `INFO keyspace`, `DBSIZE`) and `MSETNX`'s all-or-nothing, against real
//! redis-servers behind the proxy, each checked against what the servers hold.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmd, cmds, direct, pool, read_replies};
use shardring_proxy::config::{PoolConfig, ProtocolConfig};
use shardring_proxy::protocol::redis::{elements, ReplyLimits, Request};
use shardring_proxy::ProxyConfig;
use test_support::redis::{redises, RedisServer};

const SPREAD: &str = "  hash: md5\n  distribution: ketama\n";

/// The elements of an array reply, as strings.
fn strings(reply: &[u8]) -> Vec<String> {
    let ranges = elements(reply, ReplyLimits::default()).expect("an array");
    ranges.into_iter().map(|r| text(&reply[r])).collect()
}

/// A bulk string's text.
fn text(bulk: &[u8]) -> String {
    let body = bulk
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bulk, |nl| &bulk[nl + 1..]);
    String::from_utf8_lossy(body.strip_suffix(b"\r\n").unwrap_or(body)).into_owned()
}

/// A `SCAN` page: its cursor and keys.
fn page(reply: &[u8]) -> (String, Vec<String>) {
    let ranges = elements(reply, ReplyLimits::default())
        .unwrap_or_else(|| panic!("a SCAN page: {:?}", String::from_utf8_lossy(reply)));
    assert_eq!(ranges.len(), 2, "{:?}", String::from_utf8_lossy(reply));
    let cursor = text(&reply[ranges[0].clone()]);
    let keys = strings(&reply[ranges[1].clone()]);
    (cursor, keys)
}

/// A whole scan with `options`: every key it returned (with repeats), and the pages it took.
async fn scan_all(c: &mut Client, options: &[&str]) -> (Vec<String>, usize) {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    let mut pages = 0;
    loop {
        let mut args = vec!["SCAN", cursor.as_str()];
        args.extend_from_slice(options);
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let reply = cmd(c, &bytes).await;
        let (next, got) = page(&reply);
        keys.extend(got);
        pages += 1;
        assert!(pages < 1_000_000, "a scan that never ends");
        if next == "0" {
            return (keys, pages);
        }
        cursor = next;
    }
}

/// Writes `keys` (value `v`) through `c` with pipelined MSETs of 500 keys.
async fn load(c: &mut Client, keys: &[String]) {
    let chunks: Vec<&[String]> = keys.chunks(500).collect();
    for chunk in &chunks {
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for k in *chunk {
            args.push(k.as_bytes());
            args.push(b"v");
        }
        c.send(&Request::from_args(&args).frame).await;
    }
    for r in read_replies(c, chunks.len()).await {
        assert_eq!(r, b"+OK\r\n");
    }
}

/// Every server's keys, asked directly.
async fn keys_on(servers: &[RedisServer]) -> Vec<HashSet<String>> {
    let mut out = Vec::new();
    for s in servers {
        let mut d = direct(s).await;
        out.push(
            strings(&cmd(&mut d, &[b"KEYS", b"*"]).await)
                .into_iter()
                .collect(),
        );
    }
    out
}

async fn dbsize(s: &RedisServer) -> u64 {
    let mut d = direct(s).await;
    let r = cmds(&mut d, &["DBSIZE"]).await;
    r.trim_start_matches(':').trim_end().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_scan_returns_every_key_present_throughout_while_others_come_and_go() {
    let Some(servers) = redises(4, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, SPREAD)).await;
    let mut c = proxy.client().await;
    // 20,000 keys by default; SPAN_SCAN_KEYS=100000 for the size.
    let n: usize = std::env::var("SPAN_SCAN_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let stay: Vec<String> = (0..n).map(|i| format!("stay:{i}")).collect();
    let churn: Vec<String> = (0..4_000).map(|i| format!("churn:{i}")).collect();
    load(&mut c, &stay).await;
    load(&mut c, &churn).await;
    let per_server = keys_on(&servers).await;
    assert!(
        per_server.iter().all(|k| k.len() > 1000),
        "the keys are spread over the four servers"
    );

    // While the scan runs, another connection deletes the churn keys and adds new ones.
    let mut other = proxy.client().await;
    let churner = tokio::spawn(async move {
        for (i, chunk) in churn.chunks(100).enumerate() {
            let mut del: Vec<&[u8]> = vec![b"DEL"];
            del.extend(chunk.iter().map(String::as_bytes));
            cmd(&mut other, &del).await;
            let fresh: Vec<String> = (0..100).map(|j| format!("new:{i}:{j}")).collect();
            load(&mut other, &fresh).await;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let started = Instant::now();
    let (seen, pages) = scan_all(&mut c, &["COUNT", "100"]).await;
    let through_proxy = started.elapsed();
    churner.await.unwrap();
    let seen_set: HashSet<&str> = seen.iter().map(String::as_str).collect();
    let missing: Vec<&String> = stay
        .iter()
        .filter(|k| !seen_set.contains(k.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} keys present throughout were not returned, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(
        seen.iter()
            .all(|k| k.starts_with("stay:") || k.starts_with("churn:") || k.starts_with("new:")),
        "only keys the pool had"
    );
    let churned = seen.iter().filter(|k| k.starts_with("churn:")).count();
    assert!(churned < 4_000, "the churn ran during the scan");

    // The same keyspace scanned on each server directly, for comparison.
    let started = Instant::now();
    let mut direct_keys = 0;
    for s in &servers {
        let mut d = direct(s).await;
        let (keys, _) = scan_all(&mut d, &["COUNT", "100"]).await;
        direct_keys += keys.len();
    }
    let direct_time = started.elapsed();
    let started = Instant::now();
    let (quiet, quiet_pages) = scan_all(&mut c, &["COUNT", "100"]).await;
    let quiet_time = started.elapsed();
    assert_eq!(
        quiet.len(),
        direct_keys,
        "nothing changes now: each key once"
    );
    eprintln!(
        "SCAN COUNT 100: {} keys in {pages} pages in {through_proxy:?} through the proxy with the \
         churn running; {} keys in {quiet_pages} pages in {quiet_time:?} through the proxy after \
         it; {direct_keys} keys in {direct_time:?} directly on the 4 servers in turn",
        seen.len(),
        quiet.len()
    );

    // MATCH and COUNT pass through: exactly the matching keys (nothing changes now).
    let (matched, _) = scan_all(&mut c, &["MATCH", "stay:1*", "COUNT", "1000"]).await;
    let matched: HashSet<String> = matched.into_iter().collect();
    let want: HashSet<String> = stay
        .iter()
        .filter(|k| k.starts_with("stay:1"))
        .cloned()
        .collect();
    assert_eq!(matched, want);
    // TYPE: the hashes only.
    for i in 0..30 {
        let h = format!("hash:{i}");
        assert_eq!(cmds(&mut c, &["HSET", &h, "f", "v"]).await, ":1\r\n");
    }
    let (hashes, _) = scan_all(&mut c, &["TYPE", "hash", "COUNT", "500"]).await;
    let hashes: HashSet<String> = hashes.into_iter().collect();
    assert_eq!(hashes, (0..30).map(|i| format!("hash:{i}")).collect());
    // A server's own error for a malformed option, naming the server.
    let bad = cmds(&mut c, &["SCAN", "0", "COUNT", "0"]).await;
    assert!(
        bad.starts_with("-ERR syntax error (server 127.0.0.1:"),
        "{bad}"
    );

    for cursor in [
        "abc",
        "-1",
        "18446744073709551616",
        "99999999999999999999999999",
        "1e3",
    ] {
        assert_eq!(
            cmds(&mut c, &["SCAN", cursor]).await,
            "-ERR invalid cursor\r\n",
            "{cursor}"
        );
    }
    proxy.stop().await;
}

/// A cursor of a scan under way on `c`: one whose server has more to give.
async fn cursor_under_way(c: &mut Client) -> u64 {
    let (cursor, _) = page(&cmd(c, &[b"SCAN", b"0", b"COUNT", b"10"]).await);
    let cursor: u64 = cursor.parse().unwrap();
    assert_ne!(cursor, 0, "server 0 has more than ten keys");
    cursor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_a_cursor_of_another_server_list_or_past_the_pools_servers_is_refused() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let config = pool(&servers, SPREAD);
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..3000).map(|i| format!("k{i}")).collect();
    load(&mut c, &keys).await;
    let cursor = cursor_under_way(&mut c).await;
    let check = cursor & 0xffff;
    // Three servers take two bits: index 3 names none.
    let past = (3 << 16) | check;
    assert_eq!(
        cmds(&mut c, &["SCAN", &past.to_string()]).await,
        "-ERR invalid cursor\r\n"
    );
    let other = cursor ^ 1;
    assert!(cmds(&mut c, &["SCAN", &other.to_string()])
        .await
        .starts_with("-ERR invalid cursor: the pool's servers changed since this scan began"));
    // The cursor still works...
    assert!(cmds(&mut c, &["SCAN", &cursor.to_string()])
        .await
        .starts_with("*2\r\n"));
    // ...until a reload changes the server list: then it is refused, and a new scan works.
    let mut fewer: PoolConfig = config.clone();
    fewer.servers.truncate(2);
    proxy
        .proxy
        .reload(ProxyConfig { pools: vec![fewer] })
        .unwrap();
    let refused = cmds(&mut c, &["SCAN", &cursor.to_string()]).await;
    assert!(
        refused.starts_with("-ERR invalid cursor: the pool's servers changed"),
        "{refused}"
    );
    let (seen, _) = scan_all(&mut c, &["COUNT", "1000"]).await;
    let on_two: usize = keys_on(&servers[..2]).await.iter().map(HashSet::len).sum();
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), on_two);
    proxy.stop().await;
}

/// `db0`'s fields in an `INFO keyspace` text.
fn db0(info: &str) -> Option<(u64, u64)> {
    let line = info.lines().find(|l| l.starts_with("db0:"))?;
    let field = |name: &str| -> u64 {
        line["db0:".len()..]
            .split(',')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .unwrap()
            .parse()
            .unwrap()
    };
    Some((field("keys"), field("expires")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_keyspace_commands_answer_for_every_server() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, SPREAD)).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    load(&mut c, &keys).await;
    for k in &keys[..40] {
        assert_eq!(cmds(&mut c, &["EXPIRE", k, "1000"]).await, ":1\r\n");
    }
    // DBSIZE: the servers' sum.
    let mut sum = 0;
    for s in &servers {
        sum += dbsize(s).await;
    }
    assert_eq!(sum, 300);
    assert_eq!(cmds(&mut c, &["DBSIZE"]).await, format!(":{sum}\r\n"));
    // KEYS: the union of the servers' keys, each once.
    let per_server = keys_on(&servers).await;
    assert!(per_server.iter().all(|k| !k.is_empty()), "spread");
    let union: HashSet<String> = per_server.iter().flatten().cloned().collect();
    let got = strings(&cmd(&mut c, &[b"KEYS", b"*"]).await);
    assert_eq!(got.len(), 300, "each key once");
    assert_eq!(got.into_iter().collect::<HashSet<_>>(), union);
    let ones: HashSet<String> = strings(&cmd(&mut c, &[b"KEYS", b"k1?"]).await)
        .into_iter()
        .collect();
    assert_eq!(ones, (10..20).map(|i| format!("k{i}")).collect());
    // RANDOMKEY: a key the pool has, from more than one server.
    let mut picked = HashSet::new();
    for _ in 0..60 {
        let reply = cmds(&mut c, &["RANDOMKEY"]).await;
        let key = reply.split("\r\n").nth(1).unwrap_or_default().to_owned();
        assert!(union.contains(&key), "{key}");
        picked.insert(per_server.iter().position(|s| s.contains(&key)).unwrap());
    }
    assert!(picked.len() > 1, "keys of several servers: {picked:?}");
    // INFO keyspace: the servers' db0 lines summed.
    let info = cmds(&mut c, &["INFO", "keyspace"]).await;
    assert!(info.contains("# Keyspace\r\n"), "{info}");
    assert!(
        !info.contains("redis_version"),
        "the keyspace section alone: {info}"
    );
    assert_eq!(db0(&info), Some((300, 40)), "{info}");
    let all = cmds(&mut c, &["INFO", "all"]).await;
    assert!(
        all.contains("redis_version:") && db0(&all) == Some((300, 40)),
        "{all}"
    );
    let both = cmds(&mut c, &["INFO", "server", "keyspace"]).await;
    assert!(
        both.contains("redis_version:") && db0(&both) == Some((300, 40)),
        "{both}"
    );
    // A plain INFO is the proxy's, as before: no server asked.
    let plain = cmds(&mut c, &["INFO"]).await;
    assert!(plain.contains("# db:0 servers:3 live:3"), "{plain}");
    // Inside a transaction, refused (a transaction runs on one server).
    assert_eq!(cmds(&mut c, &["MULTI"]).await, "+OK\r\n");
    assert_eq!(
        cmds(&mut c, &["KEYS", "*"]).await,
        "-ERR KEYS inside MULTI is not supported by the proxy\r\n"
    );
    assert!(cmds(&mut c, &["EXEC"]).await.starts_with("-EXECABORT"));

    // FLUSHDB: every server emptied; then the pool answers as an empty one.
    assert_eq!(
        cmds(&mut c, &["FLUSHDB", "bogus"]).await,
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        dbsize(&servers[0]).await + dbsize(&servers[1]).await + dbsize(&servers[2]).await,
        300
    );
    assert_eq!(cmds(&mut c, &["FLUSHDB"]).await, "+OK\r\n");
    for s in &servers {
        assert_eq!(dbsize(s).await, 0);
    }
    assert_eq!(cmds(&mut c, &["RANDOMKEY"]).await, "$-1\r\n");
    assert_eq!(cmds(&mut c, &["KEYS", "*"]).await, "*0\r\n");
    assert_eq!(
        cmds(&mut c, &["SCAN", "0"]).await,
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
    assert_eq!(cmds(&mut c, &["DBSIZE"]).await, ":0\r\n");
    let empty = cmds(&mut c, &["INFO", "keyspace"]).await;
    assert_eq!(db0(&empty), None, "{empty}");
    load(&mut c, &keys[..10]).await;
    assert_eq!(cmds(&mut c, &["FLUSHALL", "ASYNC"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["DBSIZE"]).await, ":0\r\n");

    // RESP3: the same commands, the servers' RESP3 replies passed on.
    let mut c3 = proxy.client().await;
    assert!(cmds(&mut c3, &["HELLO", "3"]).await.starts_with('%'));
    assert_eq!(cmds(&mut c3, &["RANDOMKEY"]).await, "_\r\n");
    load(&mut c3, &keys[..50]).await;
    let (seen, _) = scan_all(&mut c3, &["COUNT", "7"]).await;
    assert_eq!(seen.into_iter().collect::<HashSet<_>>().len(), 50);
    let info3 = cmds(&mut c3, &["INFO", "keyspace"]).await;
    assert!(
        info3.starts_with('=') && db0(&info3) == Some((50, 0)),
        "{info3}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_keys_over_the_limit_is_refused_with_a_clear_error() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let mut config = pool(&servers, SPREAD);
    if let ProtocolConfig::Redis(r) = &mut config.protocol {
        r.keys_limit = 100;
    }
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..150).map(|i| format!("k{i}")).collect();
    load(&mut c, &keys).await;
    assert_eq!(
        cmds(&mut c, &["KEYS", "*"]).await,
        "-ERR KEYS would answer 150 keys, over this pool's limit of 100 (--redis-keys-limit): use SCAN\r\n"
    );
    // Under the limit, answered; and the connection goes on.
    assert_eq!(strings(&cmd(&mut c, &[b"KEYS", b"k1*"]).await).len(), 61);
    assert_eq!(cmds(&mut c, &["PING"]).await, "+PONG\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_msetnx_across_servers_is_refused_and_writes_nothing() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, SPREAD)).await;
    let mut c = proxy.client().await;
    let names: Vec<String> = (0..20).map(|i| format!("nx{i}")).collect();
    let mut args: Vec<&str> = vec!["MSETNX"];
    for n in &names {
        args.push(n);
        args.push("v");
    }
    assert_eq!(
        cmds(&mut c, &args).await,
        "-CROSSSLOT Keys in request don't hash to the same server\r\n"
    );
    for s in &servers {
        assert_eq!(dbsize(s).await, 0, "nothing written on {}", s.addr);
    }
    let mut exists: Vec<&str> = vec!["EXISTS"];
    exists.extend(names.iter().map(String::as_str));
    assert_eq!(cmds(&mut c, &exists).await, ":0\r\n");
    // On one server (a hash tag), Redis's own all-or-nothing.
    assert_eq!(
        cmds(&mut c, &["MSETNX", "{u}a", "1", "{u}b", "2"]).await,
        ":1\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["MSETNX", "{u}b", "3", "{u}c", "4"]).await,
        ":0\r\n"
    );
    assert_eq!(cmds(&mut c, &["EXISTS", "{u}c"]).await, ":0\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_a_server_down_fails_the_commands_that_need_it_naming_it() {
    let Some(mut servers) = redises(3, &[]) else {
        return;
    };
    let mut config = pool(&servers, SPREAD);
    config.timeout = Some(Duration::from_millis(500));
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    load(&mut c, &keys).await;
    let down = servers[1].addr.clone();
    servers[1].kill();
    let keys_reply = cmds(&mut c, &["KEYS", "*"]).await;
    assert!(
        keys_reply.starts_with("-ERR") && keys_reply.contains(&down),
        "{keys_reply}"
    );
    // A count short by the dead server's keys would look right: an error naming it instead.
    let size = cmds(&mut c, &["DBSIZE"]).await;
    assert!(size.starts_with("-ERR") && size.contains(&down), "{size}");
    let flush = cmds(&mut c, &["FLUSHDB"]).await;
    assert!(
        flush.starts_with("-ERR")
            && flush.contains(&down)
            && flush.ends_with("; FLUSHDB flushed 2 of 3 servers\r\n"),
        "{flush}"
    );
    // The others did flush: a RANDOMKEY without the dead server's keys is its error, not nil.
    let random = cmds(&mut c, &["RANDOMKEY"]).await;
    assert!(
        random.starts_with("-ERR") && random.contains(&down),
        "{random}"
    );
    // A scan reaches the dead server and stops there with its error.
    let mut cursor = "0".to_string();
    let failed = loop {
        let reply = cmd(&mut c, &[b"SCAN", cursor.as_bytes(), b"COUNT", b"1000"]).await;
        if reply.starts_with(b"-") {
            break String::from_utf8_lossy(&reply).into_owned();
        }
        let (next, _) = page(&reply);
        assert_ne!(next, "0", "the scan cannot end without server 1");
        cursor = next;
    };
    assert!(failed.contains(&down), "{failed}");
    proxy.stop().await;
}

/// redis-py's `scan_iter` through the proxy, when redis-py is installed (skipped otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_redis_pys_scan_iter_returns_every_key() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    // Debian's interpreter first: a python3 earlier on PATH (pyenv, venv) may lack Debian's modules.
    let python = ["/usr/bin/python3", "python3"].into_iter().find(|python| {
        std::process::Command::new(python)
            .args(["-c", "import redis"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(python) = python else {
        let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        assert!(!in_ci, "python3-redis must be installed in CI");
        eprintln!("redis-py is not installed: skipped (.ci/run installs python3-redis)");
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, SPREAD)).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..5000).map(|i| format!("py:{i}")).collect();
    load(&mut c, &keys).await;
    let (host, port) = proxy.addr.rsplit_once(':').unwrap();
    let script = format!(
        "import redis\n\
         r = redis.Redis(host='{host}', port={port})\n\
         print(len(set(r.scan_iter(count=200))), len(set(r.scan_iter(match='py:1*'))))\n"
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .args(["-c", &script])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let matching = keys.iter().filter(|k| k.starts_with("py:1")).count();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("5000 {matching}")
    );
    proxy.stop().await;
}
