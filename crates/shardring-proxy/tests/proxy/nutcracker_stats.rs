//! The stats JSON as nutcracker's readers see it, against a live nutcracker's over the same
//! configuration.
//!
//! Those readers (telegraf's `twemproxy` input, the New Relic and Diamond collectors, most scripts) do
//! not look the pools and servers up by name: they walk the JSON, taking every object at the top level
//! for a pool and every object inside a pool for a server, and read the server's fields without asking:
//!
//! ```python
//! for pool_name, pool in stats.items():
//!     if isinstance(pool, dict):
//!         pool["client_eof"], pool["forward_error"], ...
//!         for server_name, server in pool.items():
//!             if isinstance(server, dict):
//!                 server["requests"], server["server_err"], ...  # KeyError on anything else
//! ```
//!
//! So an object of the proxy's own inside a pool (a hot-key table, a command table) breaks them. The
//! test turns on what the proxy measures beyond nutcracker (`--hot-keys`, a Redis pool with commands
//! sent), walks both JSONs read off their stats ports exactly like that, and compares what the walks
//! found. Skipped outside CI when nutcracker or redis-server is missing.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use shardring_proxy::flags::ProxyFlags;
use shardring_proxy::{metrics, ProxyConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::common::{Client, RunningProxy, IO_TIMEOUT};
use crate::redis_common::cmds;
use test_support::{free_port, memcacheds, redises, Memcached, RedisServer, TempDir};

/// The fields a nutcracker reader reads from every pool object (nutcracker's `--describe-stats`).
const POOL_FIELDS: &[&str] = &[
    "client_eof",
    "client_err",
    "client_connections",
    "server_ejects",
    "forward_error",
    "fragments",
];

/// The fields a nutcracker reader reads from every server object (nutcracker's `--describe-stats`).
const SERVER_FIELDS: &[&str] = &[
    "server_eof",
    "server_err",
    "server_timedout",
    "server_connections",
    "server_ejected_at",
    "requests",
    "request_bytes",
    "responses",
    "response_bytes",
    "in_queue",
    "in_queue_bytes",
    "out_queue",
    "out_queue_bytes",
];

/// What an exporter's walk found: the top level's fields that are not pools, and each pool's.
#[derive(Debug, Default, PartialEq)]
struct Walked {
    /// The top level's fields that are not pools.
    top: BTreeSet<String>,
    /// The pools, by name.
    pools: BTreeMap<String, WalkedPool>,
}

/// One pool, as an exporter's walk found it.
#[derive(Debug, Default, PartialEq)]
struct WalkedPool {
    /// Its fields that are not servers.
    fields: BTreeSet<String>,
    /// Its servers, by name, with their fields.
    servers: BTreeMap<String, BTreeSet<String>>,
}

/// Walks `stats` exactly as a nutcracker exporter does, reading every field it reads; `Err` with what
/// the exporter would raise (`KeyError`, or a `TypeError` for a value that is not a number) where it
/// would raise it.
fn walk_like_an_exporter(stats: &Value) -> Result<Walked, String> {
    let top = stats
        .as_object()
        .ok_or_else(|| format!("not a JSON object: {stats}"))?;
    let mut walked = Walked::default();
    for (pool_name, pool) in top {
        let Some(pool) = pool.as_object() else {
            walked.top.insert(pool_name.clone());
            continue;
        };
        for field in POOL_FIELDS {
            number(pool, field).map_err(|e| format!("pool {pool_name}: {e}"))?;
        }
        let mut walked_pool = WalkedPool::default();
        for (server_name, server) in pool {
            let Some(server) = server.as_object() else {
                walked_pool.fields.insert(server_name.clone());
                continue;
            };
            for field in SERVER_FIELDS {
                number(server, field).map_err(|e| format!("{pool_name}.{server_name}: {e}"))?;
            }
            walked_pool
                .servers
                .insert(server_name.clone(), server.keys().cloned().collect());
        }
        walked.pools.insert(pool_name.clone(), walked_pool);
    }
    Ok(walked)
}

/// `object[field]` as an exporter reads it: present, and a number.
fn number(object: &Map<String, Value>, field: &str) -> Result<f64, String> {
    let value = object
        .get(field)
        .ok_or_else(|| format!("KeyError: '{field}'"))?;
    value
        .as_f64()
        .ok_or_else(|| format!("TypeError: '{field}' is {value}, not a number"))
}

/// The kind of a JSON value, to compare two readings of one field.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The configuration both proxies run: a memcached pool and a Redis pool, each with a named server and
/// an unnamed one (nutcracker names the latter `host:port`).
fn yaml(mc_listen: &str, rd_listen: &str, mc: &[Memcached], rd: &[RedisServer]) -> String {
    format!(
        "mc:\n  listen: {mc_listen}\n  servers:\n   - {}:1\n   - {}:1 cache-1\n\
         rd:\n  listen: {rd_listen}\n  redis: true\n  servers:\n   - {}:1\n   - {}:1 redis-1\n",
        mc[0].addr, mc[1].addr, rd[0].addr, rd[1].addr
    )
}

/// A nutcracker child on a config file, with its stats on a port this test knows (test-support's
/// starter does not say which it picked), killed on drop.
struct LiveNutcracker {
    child: Child,
    /// Where it serves its stats JSON.
    stats: String,
    _dir: TempDir,
}

impl LiveNutcracker {
    /// Runs nutcracker on `config` and waits until every one of `listens` accepts. `None` (the test is
    /// skipped) when nutcracker is not installed, except in CI.
    fn start(config: &str, listens: &[&str]) -> Option<LiveNutcracker> {
        let dir = TempDir::new("nc-stats");
        let conf = dir.path().join("nutcracker.yml");
        std::fs::write(&conf, config).expect("nutcracker.yml written");
        let port = free_port();
        let child = match Command::new("nutcracker")
            .arg("-c")
            .arg(&conf)
            .args(["-s", &port.to_string(), "-a", "127.0.0.1", "-o"])
            .arg(dir.path().join("nutcracker.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "nutcracker must be installed in CI: {e}"
                );
                eprintln!("skipping: nutcracker not runnable here ({e}); .ci/run installs it");
                return None;
            }
        };
        let mut nc = LiveNutcracker {
            child,
            stats: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for addr in listens.iter().copied().chain([nc.stats.as_str()]) {
            while std::net::TcpStream::connect(addr).is_err() {
                let exited = nc.child.try_wait().ok().flatten().is_some();
                assert!(
                    !exited && Instant::now() < deadline,
                    "nutcracker did not start on {addr}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Some(nc)
    }
}

impl Drop for LiveNutcracker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stats JSON at `addr`, read as nutcracker's readers read it: connect, read to EOF, parse.
async fn stats_json(addr: &str) -> Value {
    let read = async {
        let mut s = TcpStream::connect(addr).await.expect("connect to stats");
        let mut body = String::new();
        s.read_to_string(&mut body).await.expect("read the stats");
        body
    };
    let body = tokio::time::timeout(IO_TIMEOUT, read)
        .await
        .expect("the stats in time");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("stats JSON from {addr}: {e}: {body}"))
}

/// `GET path` from the HTTP listener at `addr`, its body as JSON.
async fn http_json(addr: &str, path: &str) -> Value {
    let fetch = async {
        let mut s = TcpStream::connect(addr).await.expect("connect to metrics");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
        let mut text = String::new();
        s.read_to_string(&mut text).await.expect("read");
        text
    };
    let text = tokio::time::timeout(IO_TIMEOUT, fetch)
        .await
        .expect("an answer in time");
    assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text}");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// The same requests, through either proxy: memcached sets and gets (a hot key among them) and Redis
/// commands, one of them a multi-key `MGET`.
async fn traffic(mc_addr: &str, rd_addr: &str) {
    let mut mc = Client::connect(mc_addr).await;
    for i in 0..20 {
        mc.check(format!("set k{i} 0 0 1\r\nv\r\n").as_bytes(), b"STORED\r\n")
            .await;
    }
    for _ in 0..30 {
        mc.check(b"get k0\r\n", b"VALUE k0 0 1\r\nv\r\nEND\r\n")
            .await;
    }
    let mut rd = Client::connect(rd_addr).await;
    for i in 0..20 {
        assert_eq!(
            cmds(&mut rd, &["SET", &format!("r{i}"), "v"]).await,
            "+OK\r\n"
        );
    }
    for _ in 0..30 {
        assert_eq!(cmds(&mut rd, &["GET", "r0"]).await, "$1\r\nv\r\n");
    }
    let reply = cmds(&mut rd, &["MGET", "r0", "r1", "r2", "r3"]).await;
    assert!(reply.starts_with("*4\r\n"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exporter_walks_our_stats_json_as_it_walks_nutcrackers() {
    let Some(rd) = redises(2, &[]) else {
        return;
    };
    let mc = memcacheds(2);
    let nc_mc = format!("127.0.0.1:{}", free_port());
    let nc_rd = format!("127.0.0.1:{}", free_port());
    let Some(nc) = LiveNutcracker::start(&yaml(&nc_mc, &nc_rd, &mc, &rd), &[&nc_mc, &nc_rd]) else {
        return;
    };

    // Ours, over the same file (but its listen ports), with `--hot-keys 10`; its stats JSON on a stats
    // listener and the JSON endpoints on an HTTP one, served as `shardring proxy` serves them.
    let ours = ProxyConfig::from_yaml(&yaml(
        &format!("127.0.0.1:{}", free_port()),
        &format!("127.0.0.1:{}", free_port()),
        &mc,
        &rd,
    ))
    .expect("the config reads");
    let mut flags = ProxyFlags::default();
    flags.hot_keys.hot_keys = Some(10);
    let ours = flags.apply(ours).expect("--hot-keys applies");
    let proxy = RunningProxy::start_pools(ours.pools).await;
    let stop = CancellationToken::new();
    let stats_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind stats");
    let stats_addr = stats_listener
        .local_addr()
        .expect("stats address")
        .to_string();
    let metrics_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind metrics");
    let metrics_addr = metrics_listener
        .local_addr()
        .expect("metrics address")
        .to_string();
    let p = Arc::clone(&proxy.proxy);
    let stats_task = tokio::spawn(metrics::serve_json(
        stats_listener,
        proxy.proxy.started(),
        move || p.views(),
        stop.clone(),
    ));
    let p = Arc::clone(&proxy.proxy);
    let metrics_task = tokio::spawn(metrics::serve_prometheus(
        metrics_listener,
        proxy.proxy.started(),
        move || p.views(),
        stop.clone(),
    ));

    traffic(&nc_mc, &nc_rd).await;
    traffic(&proxy.addrs[0], &proxy.addrs[1]).await;
    // The rankings refresh every 100 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // What used to sit inside the pools exists, and is served beside `/metrics`.
    let hot = http_json(&metrics_addr, "/hotkeys").await;
    for (i, (pool, key)) in [("mc", "k0"), ("rd", "r0")].into_iter().enumerate() {
        assert_eq!(hot["pools"][i]["pool"], pool, "{hot}");
        assert_eq!(hot["pools"][i]["keys"][0]["key"], key, "{hot}");
    }
    let latency = http_json(&metrics_addr, "/command-latency").await;
    assert_eq!(latency["pools"][0]["pool"], "mc", "{latency}");
    assert!(latency["pools"][0]["commands"].is_null(), "{latency}");
    assert_eq!(latency["pools"][1]["pool"], "rd", "{latency}");
    for (command, n) in [("set", 20), ("get", 30), ("mget", 1)] {
        assert_eq!(
            latency["pools"][1]["commands"][command]["requests"], n,
            "{latency}"
        );
    }

    let theirs = stats_json(&nc.stats).await;
    let ours = stats_json(&stats_addr).await;
    let walked_theirs = walk_like_an_exporter(&theirs)
        .unwrap_or_else(|e| panic!("the walk fails on nutcracker's own JSON: {e}\n{theirs}"));
    let walked_ours = walk_like_an_exporter(&ours)
        .unwrap_or_else(|e| panic!("an exporter fails on our JSON: {e}\n{ours}"));

    // The walk reads what nutcracker has: its fields are exactly the exporter's.
    for (pool, walked) in &walked_theirs.pools {
        let expected: BTreeSet<String> = POOL_FIELDS.iter().map(|f| f.to_string()).collect();
        assert_eq!(walked.fields, expected, "nutcracker's pool {pool}");
        for (server, fields) in &walked.servers {
            let expected: BTreeSet<String> = SERVER_FIELDS.iter().map(|f| f.to_string()).collect();
            assert_eq!(fields, &expected, "nutcracker's server {pool}.{server}");
        }
    }

    // Every top-level field nutcracker has, of the same kind; nothing at the top level is an array.
    for field in &walked_theirs.top {
        assert_eq!(
            kind(&ours[field]),
            kind(&theirs[field]),
            "top-level {field}"
        );
    }
    for (name, value) in ours.as_object().expect("an object") {
        assert!(!value.is_array(), "top-level {name} is an array: {value}");
    }
    // The same pools, with the same servers: no object of ours inside a pool passes for a server.
    let pools = |w: &Walked| w.pools.keys().cloned().collect::<Vec<_>>();
    assert_eq!(pools(&walked_ours), pools(&walked_theirs), "pool names");
    for (pool, theirs_walked) in &walked_theirs.pools {
        let (their_fields, their_servers) = (&theirs_walked.fields, &theirs_walked.servers);
        let (our_fields, our_servers) = (
            &walked_ours.pools[pool].fields,
            &walked_ours.pools[pool].servers,
        );
        assert!(
            our_fields.is_superset(their_fields),
            "pool {pool} lacks some of {their_fields:?}"
        );
        let names = |s: &BTreeMap<String, BTreeSet<String>>| s.keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(our_servers),
            names(their_servers),
            "the objects in pool {pool} are its servers, named as nutcracker names them"
        );
        for (server, their_fields) in their_servers {
            assert!(
                our_servers[server].is_superset(their_fields),
                "server {pool}.{server} lacks some of {their_fields:?}"
            );
            // A reader keeps a server's numbers (telegraf drops the rest): ours are all numbers.
            for (field, value) in ours[pool][server].as_object().expect("a server") {
                assert!(value.is_number(), "{pool}.{server}.{field} = {value}");
            }
        }
        // The pool's own fields are scalars, as nutcracker's: a reader skips those it does not know.
        for field in our_fields {
            let value = &ours[pool][field];
            assert!(
                !value.is_array() && !value.is_object(),
                "{pool}.{field} = {value}"
            );
        }
    }

    stop.cancel();
    let _ = stats_task.await;
    let _ = metrics_task.await;
    proxy.stop().await;
    drop(nc);
}
