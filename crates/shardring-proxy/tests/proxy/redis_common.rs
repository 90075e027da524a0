//! RESP helpers for the redis pools' tests: a pool's YAML and config over real servers, and a raw
//! client's commands and replies.

use crate::common::{Client, IO_TIMEOUT};
use shardring_proxy::config::PoolConfig;
use shardring_proxy::protocol::redis::{reply_len, ReplyLimits, Request};
use shardring_proxy::ProxyConfig;
use test_support::free_port;
use test_support::redis::RedisServer;
use tokio::io::AsyncReadExt;

/// A pool's YAML over `servers`: mixed names and weights, `hash_tag: "{}"`.
pub fn yaml(listen: &str, servers: &[RedisServer], extra: &str) -> String {
    let mut y = format!(
        "alpha:\n  listen: {listen}\n  redis: true\n  hash_tag: \"{{}}\"\n{extra}  servers:\n"
    );
    for (i, s) in servers.iter().enumerate() {
        if i % 2 == 0 {
            y.push_str(&format!("   - {}:{}\n", s.addr, i + 1));
        } else {
            y.push_str(&format!("   - {}:{} redis-{i}\n", s.addr, i + 1));
        }
    }
    y
}

pub fn pool(servers: &[RedisServer], extra: &str) -> PoolConfig {
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = ProxyConfig::from_yaml(&yaml(&listen, servers, extra)).expect("valid yaml");
    cfg.pools.into_iter().next().unwrap()
}

/// Sends a command and reads one whole RESP reply.
pub async fn cmd(c: &mut Client, args: &[&[u8]]) -> Vec<u8> {
    c.send(&Request::from_args(args).frame).await;
    read_reply(c).await
}

pub async fn cmds(c: &mut Client, args: &[&str]) -> String {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8_lossy(&cmd(c, &bytes).await).into_owned()
}

pub async fn read_reply(c: &mut Client) -> Vec<u8> {
    let mut buf = Vec::new();
    loop {
        if let Some(n) = reply_len(&buf, ReplyLimits::default()).expect("a RESP reply") {
            assert_eq!(n, buf.len(), "one reply at a time");
            return buf;
        }
        let mut chunk = vec![0u8; 65536];
        let n = tokio::time::timeout(IO_TIMEOUT, c.stream.read(&mut chunk))
            .await
            .expect("a reply in time")
            .expect("read");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads `n` whole replies (pipelined).
pub async fn read_replies(c: &mut Client, n: usize) -> Vec<Vec<u8>> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        while let Some(len) = reply_len(&buf, ReplyLimits::default()).expect("RESP") {
            out.push(buf.drain(..len).collect());
            if out.len() == n {
                break;
            }
        }
        if out.len() == n {
            break;
        }
        let mut chunk = vec![0u8; 65536];
        let r = tokio::time::timeout(IO_TIMEOUT, c.stream.read(&mut chunk))
            .await
            .expect("replies in time")
            .expect("read");
        assert!(r > 0, "closed after {} replies", out.len());
        buf.extend_from_slice(&chunk[..r]);
    }
    out
}

pub async fn direct(s: &RedisServer) -> Client {
    Client::connect(&s.addr).await
}
