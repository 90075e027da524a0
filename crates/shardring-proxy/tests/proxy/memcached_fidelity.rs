//! Malformed input answered as memcached 1.6 answers it: every bad-input row of the protocol module's
//! table is sent to a live memcached and to the proxy in front of one, on fresh connections, and the
//! replies must be the same bytes; and retrieval commands take any number of keys, as memcached does
//! (a 10,000-key `get` of 250-byte keys is a 2.5 MB line).

use std::time::Duration;

use crate::common::{pool_config, Client, RunningProxy};
use test_support::memcacheds;
use tokio::io::AsyncReadExt;

/// Everything a connection answers to `input` until it has been quiet for a moment (or closes).
async fn exchange(addr: &str, input: &[u8]) -> Vec<u8> {
    let mut c = Client::connect(addr).await;
    c.send(input).await;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_millis(150), c.stream.read(&mut buf)).await {
            Ok(Ok(0)) => {
                out.extend_from_slice(b"<closed>");
                break;
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(_)) | Err(_) => break,
        }
    }
    out
}

/// Inputs whose every reply byte must be memcached's. (A refused storage command whose length parsed
/// is the one documented difference, tested below: the proxy skips its data block, memcached reads the
/// block as a command.)
const SAME_AS_MEMCACHED: &[&[u8]] = &[
    b"get\r\n",
    b"gets\r\n",
    b"gat\r\n",
    b"gats\r\n",
    b"gat 10\r\n",
    b"gat x k\r\n",
    b"\r\n",
    b"   \r\n",
    b"foo\r\n",
    b"GET k\r\n",
    b"set k\r\n",
    b"set k 0 0\r\n",
    b"set k 0 0 x\r\n",
    b"cas k 0 0 1\r\n",
    b"delete\r\n",
    b"delete k 1\r\n",
    b"delete k 0 0 0\r\n",
    b"incr k\r\n",
    b"incr k x\r\n",
    b"incr k -1\r\n",
    b"decr k 1 2 3\r\n",
    b"touch k\r\n",
    b"touch k x\r\n",
    b"mg\r\n",
    b"md\r\n",
    b"ms k\r\n",
    b"ms k x\r\n",
    b"verbosity\r\n",
    b"verbosity x\r\n",
    b"flush_all x\r\n",
    b"flush_all 1 2 3\r\n",
    b"stats foo\r\n",
    b"stats noreply\r\n",
    b"get a b\r\n",
    b"incr nokey 1\r\n",
];

#[tokio::test]
async fn malformed_lines_get_what_memcached_answers() {
    let servers = memcacheds(1);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    // Fresh connections, all at once (each exchange waits for quiet).
    let (direct_addr, proxy_addr) = (servers[0].addr.as_str(), proxy.addr.as_str());
    let both = SAME_AS_MEMCACHED.iter().map(|&input| async move {
        let (direct, proxied) =
            tokio::join!(exchange(direct_addr, input), exchange(proxy_addr, input));
        (input, direct, proxied)
    });
    let mut differ = Vec::new();
    for (input, direct, proxied) in futures_util::future::join_all(both).await {
        if direct != proxied {
            differ.push(format!(
                "{:?}: memcached {:?}, proxy {:?}",
                String::from_utf8_lossy(input),
                String::from_utf8_lossy(&direct),
                String::from_utf8_lossy(&proxied)
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    proxy.stop().await;
}

#[tokio::test]
async fn a_refused_storage_command_gets_memcacheds_first_reply_and_its_block_is_skipped() {
    let servers = memcacheds(1);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    for input in [&b"set k x 0 1\r\nx\r\n"[..], b"set k 0 0 1\r\nxy\r\n"] {
        let direct = exchange(&servers[0].addr, input).await;
        let proxied = exchange(&proxy.addr, input).await;
        let first_line = |b: &[u8]| b[..=b.iter().position(|&c| c == b'\n').unwrap()].to_vec();
        assert_eq!(first_line(&direct), first_line(&proxied), "{input:?}");
    }
    proxy.stop().await;
}

#[tokio::test]
async fn a_get_of_ten_thousand_long_keys_is_answered_whole_as_memcached_answers_it() {
    let servers = memcacheds(4);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let key = |i: usize| format!("{i:0>250}");
    let mut c = proxy.client().await;
    // Store every tenth key, then ask for all 10,000 in one 2.5 MB line.
    let mut sets = String::new();
    for i in (0..10_000).step_by(10) {
        sets.push_str(&format!(
            "set {} 0 0 {}\r\n{i}\r\n",
            key(i),
            i.to_string().len()
        ));
    }
    c.send(sets.as_bytes()).await;
    for _ in 0..1000 {
        assert_eq!(c.read_line().await, "STORED\r\n");
    }
    let mut line = String::from("get");
    for i in 0..10_000 {
        line.push(' ');
        line.push_str(&key(i));
    }
    line.push_str("\r\n");
    assert!(line.len() > 2_500_000);
    c.send(line.as_bytes()).await;
    for i in (0..10_000).step_by(10) {
        let header = c.read_line().await;
        assert_eq!(
            header,
            format!("VALUE {} 0 {}\r\n", key(i), i.to_string().len()),
            "key {i}"
        );
        assert_eq!(c.read_line().await, format!("{i}\r\n"));
    }
    assert_eq!(c.read_line().await, "END\r\n");
    // The connection is still in step.
    c.check(
        b"version\r\n",
        shardring_proxy::protocol::memcache::VERSION_REPLY,
    )
    .await;
    // And memcached itself answers the same line the same way.
    let mut direct = Client::connect(&servers[0].addr).await;
    direct.send(line.as_bytes()).await;
    let mut values = 0;
    loop {
        let l = direct.read_line().await;
        if l == "END\r\n" {
            break;
        }
        assert!(l.starts_with("VALUE "), "{l:?}");
        direct.read_line().await;
        values += 1;
    }
    assert!(
        values > 0 && values < 1000,
        "memcached held {values} of the keys"
    );
    proxy.stop().await;
}
