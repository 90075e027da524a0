//! `noreply` and the meta commands' `q` as memcached 1.6 has them: every malformed, refused or failed
//! command that carries one is sent to a live memcached and to the proxy in front of another, each
//! followed by `mn` and a `get`, and the byte streams must be equal; pymemcache, which sends `set` with
//! `noreply` by default, stays in step through a refused value; a binary-protocol request is closed at
//! once.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{pool_config, Client, RunningProxy};
use test_support::memcacheds;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sets the keys the inputs use, on a fresh connection, so that every exchange starts from the same
/// state on both servers.
const PRELUDE: &[u8] = b"set hit 0 0 1\r\n5\r\nset text 0 0 1\r\na\r\nset counter 0 0 1\r\n1\r\n\
set sentinel 0 0 1\r\ns\r\ndelete nokey noreply\r\ndelete miss noreply\r\n";

/// What ends every exchange: `mn`, then a `get` of a key no input touches.
const TAIL: &[u8] = b"mn\r\nget sentinel\r\n";
const TAIL_REPLY: &[u8] = b"MN\r\nVALUE sentinel 0 1\r\ns\r\nEND\r\n";

/// The prelude, `input` and the tail on a fresh connection: everything answered up to the tail's reply
/// (or what came before a close or a quiet second).
async fn exchange(addr: &str, input: &[u8]) -> Vec<u8> {
    let mut c = Client::connect(addr).await;
    // The prelude's answers first: memcached drops the replies queued before a `get` it refuses
    // (a key too long) when they have not been written yet.
    c.send(PRELUDE).await;
    for _ in 0..4 {
        assert_eq!(c.read_line().await, "STORED\r\n");
    }
    let mut all = input.to_vec();
    all.extend_from_slice(TAIL);
    let mut out = Vec::new();
    if c.stream.write_all(&all).await.is_err() {
        out.extend_from_slice(b"<write failed>");
    }
    let mut buf = [0u8; 4096];
    while !out.ends_with(TAIL_REPLY) {
        match tokio::time::timeout(Duration::from_secs(1), c.stream.read(&mut buf)).await {
            Ok(Ok(0)) => {
                out.extend_from_slice(b"<closed>");
                break;
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(_)) | Err(_) => {
                out.extend_from_slice(b"<silence>");
                break;
            }
        }
    }
    out
}

/// A data block that memcached, which reads a refused storage command's block as a command of its
/// own, takes silently: so its stream and the proxy's (which skips the block) can be compared.
const SILENT_BLOCK: &str = "verbosity 0 noreply";

/// Every malformed or refused command of the protocol table with `noreply` (meta commands with `q`),
/// and commands the server refuses or fails.
fn inputs() -> Vec<Vec<u8>> {
    let long = "k".repeat(251);
    let n = SILENT_BLOCK.len();
    let block = |line: String| format!("{line}\r\n{SILENT_BLOCK}\r\n");
    let big = "x".repeat(2_000_000);
    let mut v: Vec<String> = vec![
        // Storage lines refused by the parser: bad numbers, too-long key, wrong token count.
        "set k 0 0 abc noreply\r\n".into(),
        "set k 0 0 noreply\r\n".into(),
        "set k 0 0 -1 noreply\r\n".into(),
        "add k 0 0 1x noreply\r\n".into(),
        block(format!("set k x 0 {n} noreply")),
        block(format!("replace k 0 x {n} noreply")),
        block(format!("append k -1 0 {n} noreply")),
        block(format!("cas k 0 0 {n} x noreply")),
        block(format!("set {long} 0 0 {n} noreply")),
        block(format!("prepend {long} 0 0 {n} noreply")),
        "set k 0 0 1 2 noreply\r\nx\r\n".into(),
        block(format!("cas k 0 0 {n} noreply")),
        // Over every limit: skipped by both as it arrives.
        format!("set k 0 0 {} noreply\r\n{big}\r\n", big.len()),
        // Refused by the server.
        "append nokey 0 0 1 noreply\r\nx\r\n".into(),
        "add hit 0 0 1 noreply\r\nx\r\n".into(),
        "cas hit 0 0 1 999 noreply\r\nx\r\n".into(),
        "incr text 1 noreply\r\n".into(),
        "incr nokey 1 noreply\r\n".into(),
        "decr nokey 1 noreply\r\n".into(),
        "touch nokey 0 noreply\r\n".into(),
        "delete nokey noreply\r\n".into(),
        // delete, incr/decr, touch refused by the parser.
        "delete k 1 noreply\r\n".into(),
        "delete k x noreply\r\n".into(),
        "delete k 0 0 noreply\r\n".into(),
        format!("delete {long} noreply\r\n"),
        format!("delete {long} 0 noreply\r\n"),
        "incr k x noreply\r\n".into(),
        "incr k -1 noreply\r\n".into(),
        "incr k noreply\r\n".into(),
        "incr k 18446744073709551616 noreply\r\n".into(),
        format!("decr {long} 1 noreply\r\n"),
        "decr k 1 2 noreply\r\n".into(),
        "touch k x noreply\r\n".into(),
        "touch k noreply\r\n".into(),
        "touch k 99999999999999999999 noreply\r\n".into(),
        format!("touch {long} 0 noreply\r\n"),
        // Commands without keys.
        "verbosity x noreply\r\n".into(),
        "verbosity noreply\r\n".into(),
        "verbosity 1 noreply\r\n".into(),
        "verbosity 1 2 noreply\r\n".into(),
        "flush_all x noreply\r\n".into(),
        "flush_all noreply 1\r\n".into(),
        "flush_all 1 2 noreply\r\n".into(),
        "foo noreply\r\n".into(),
        "stats noreply\r\n".into(),
        // Commands without `noreply`: the token is a key or an error.
        "gat x k noreply\r\n".into(),
        "get noreply\r\n".into(),
        // Meta commands with `q`, hits and misses.
        "mg hit v q\r\n".into(),
        "mg hit q\r\n".into(),
        "mg hit k q\r\n".into(),
        "mg miss v q\r\n".into(),
        "mg miss q\r\n".into(),
        "mg miss O123 k q\r\n".into(),
        "mg hit O123 q\r\n".into(),
        "ms hit 1 q\r\nx\r\n".into(),
        "ms hit 1 MA q\r\nx\r\n".into(),
        "ms miss 1 MR q\r\nx\r\n".into(),
        "ms miss 1 ME q\r\nx\r\n".into(),
        "ms hit 1 C999 q\r\nx\r\n".into(),
        "md hit q\r\n".into(),
        "md nokey q\r\n".into(),
        "md hit C999 q\r\n".into(),
        "md hit I q\r\n".into(),
        "ma counter q\r\n".into(),
        "ma counter v q\r\n".into(),
        "ma counter MD D9 q\r\n".into(),
        "ma nokey q\r\n".into(),
        "ma nokey v q\r\n".into(),
        "ma text q\r\n".into(),
        "me nokey q\r\n".into(),
        // Meta errors: shown, `q` or not.
        format!("mg {long} q\r\n"),
        format!("md {long} q\r\n"),
        format!("ma {long} q\r\n"),
        format!("me {long} q\r\n"),
        block(format!("ms {long} {n} q")),
        "ms hit x q\r\n".into(),
        "mg hit zz q\r\n".into(),
        "ma hit Dx q\r\n".into(),
        "mg a*b b q\r\n".into(),
        format!("ms hit {} q\r\n{big}\r\n", big.len()),
        "mg\r\n".into(),
    ];
    // Each refused line again, back to back on one connection: the stream stays in step throughout.
    // (A `get` with a key too long is not among them: memcached drops the replies it has queued and not
    // yet written when it refuses one.)
    let all: String = v.concat();
    v.push(all);
    v.push(format!("get {long} noreply\r\n"));
    v.into_iter().map(String::into_bytes).collect()
}

#[tokio::test]
async fn noreply_and_quiet_commands_get_byte_for_byte_what_memcached_sends() {
    // One server answers directly, another behind the proxy: the same state on both, never shared.
    let servers = memcacheds(2);
    let proxy = RunningProxy::start(pool_config(&servers[1..])).await;
    let mut differ = Vec::new();
    for input in inputs() {
        let (direct, proxied) = tokio::join!(
            exchange(&servers[0].addr, &input),
            exchange(&proxy.addr, &input)
        );
        assert!(direct.ends_with(TAIL_REPLY), "memcached: {direct:?}");
        if direct != proxied {
            let shown = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned();
            differ.push(format!(
                "{:?}: memcached {:?}, proxy {:?}",
                shown(&input),
                shown(&direct),
                shown(&proxied)
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    proxy.stop().await;
}

#[tokio::test]
async fn noreply_commands_stay_silent_when_their_server_is_down_or_ejected() {
    let mut servers = memcacheds(1);
    let mut config = pool_config(&servers);
    config.auto_eject_hosts = true;
    config.server_failure_limit = 1;
    config.server_retry_timeout = Duration::from_secs(60);
    let proxy = RunningProxy::start(config).await;
    servers[0].kill();
    let mut c = proxy.client().await;
    // The first round fails on connect (and ejects the server), later ones find no live server.
    for _ in 0..3 {
        c.check(
            b"set k 0 0 1 noreply\r\nx\r\nincr k 1 noreply\r\ndelete k noreply\r\n\
              touch k 0 noreply\r\nflush_all noreply\r\nmn\r\n",
            b"MN\r\n",
        )
        .await;
    }
    // Without `noreply`, the failure is answered.
    c.send(b"delete k\r\n").await;
    assert!(c.read_line().await.starts_with("SERVER_ERROR "));
    proxy.stop().await;
}

#[tokio::test]
async fn a_binary_protocol_request_is_closed_at_once() {
    let servers = memcacheds(1);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    // A binary `get` of "k": a 24-byte header and the key, no newline anywhere.
    let mut get = vec![0x80, 0x00, 0x00, 0x01];
    get.extend_from_slice(&[0; 7]);
    get.push(0x01);
    get.extend_from_slice(&[0; 12]);
    get.push(b'k');
    c.send(&get).await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(2), c.stream.read(&mut buf))
        .await
        .expect("closed within 2 s, not left waiting for a newline");
    assert_eq!(read.unwrap_or(0), 0, "no reply, then EOF");
    // Text clients are served as before.
    proxy.client().await.check(b"mn\r\n", b"MN\r\n").await;
    proxy.stop().await;
}

/// pymemcache with its defaults (`noreply=True` for `set`): a value over the server's item size,
/// then a `get` of another key.
const PYMEMCACHE_CHECK: &str = "
import sys
from pymemcache.client.base import Client
c = Client((sys.argv[1], int(sys.argv[2])), connect_timeout=5, timeout=5)
c.set('ctr', '7')
c.set('big', b'x' * int(sys.argv[3]))
print(repr(c.get('ctr')), repr(c.get('big')))
";

/// Runs [`PYMEMCACHE_CHECK`] against `addr`; `None` (skipped) when no python3 has pymemcache, outside CI.
fn pymemcache(addr: &str, value_len: usize) -> Option<String> {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    // Debian's interpreter first: a python3 earlier on PATH (pyenv, venv) may lack Debian's modules.
    for python in ["/usr/bin/python3", "python3"] {
        let has = Command::new(python)
            .args(["-c", "import pymemcache"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if has {
            let out = Command::new(python)
                .args(["-c", PYMEMCACHE_CHECK, host, port, &value_len.to_string()])
                .output()
                .expect("python3 runs");
            assert!(
                out.status.success(),
                "pymemcache against {addr}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return Some(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        }
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(!in_ci, "python3-pymemcache must be installed in CI");
    eprintln!("skipping: no python3 with pymemcache; .ci/run installs python3-pymemcache");
    None
}

#[tokio::test]
async fn pymemcache_stays_in_step_after_a_value_too_large_for_the_server() {
    let servers = memcacheds(2);
    let proxy = RunningProxy::start(pool_config(&servers[1..])).await;
    // Over memcached's default item size (1 MiB).
    let len = 1_100_000;
    let (direct_addr, proxy_addr) = (servers[0].addr.clone(), proxy.addr.clone());
    let direct = tokio::task::spawn_blocking(move || pymemcache(&direct_addr, len))
        .await
        .unwrap();
    let proxied = tokio::task::spawn_blocking(move || pymemcache(&proxy_addr, len))
        .await
        .unwrap();
    if let (Some(direct), Some(proxied)) = (direct, proxied) {
        assert_eq!(direct, "b'7' None");
        assert_eq!(proxied, direct);
    }
    proxy.stop().await;
}
