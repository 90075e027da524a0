//! Rate limits against real servers, memcached and redis-server: a hot key flooded far past its
//! limit is served at its limit and refused beyond it with a clear error (nothing for `noreply`, the
//! stream in step), while another key on the same server is never refused; the pool's limit caps
//! every request.

use std::time::{Duration, Instant};

use crate::common::{pool_config, Client, RunningProxy};
use crate::redis_common::{direct, pool as redis_pool, read_replies};
use shardring_proxy::config::{HotKeysConfig, RateLimits};
use test_support::memcacheds;
use test_support::redis::RedisServer;

/// Floods `hot` through `c` in pipelined batches for `for_how_long`, with one request for `cold`
/// every 10 ms at most (100 a second, under the limit: detection tracks it too), and counts the
/// answers: (hot served, hot refused, cold refused).
async fn flood(
    c: &mut Client,
    hot: &[u8],
    cold: &[u8],
    served: impl Fn(&[u8]) -> bool,
    for_how_long: Duration,
    read: impl AsyncReplies,
) -> (usize, usize, usize) {
    let (mut ok, mut refused, mut cold_refused) = (0, 0, 0);
    let started = Instant::now();
    let mut last_cold = started;
    while started.elapsed() < for_how_long {
        let mut batch = Vec::new();
        for _ in 0..20 {
            batch.extend_from_slice(hot);
        }
        let with_cold = last_cold.elapsed() >= Duration::from_millis(10);
        if with_cold {
            batch.extend_from_slice(cold);
            last_cold = Instant::now();
        }
        c.send(&batch).await;
        let replies = read.read(c, 20 + usize::from(with_cold)).await;
        for r in &replies[..20] {
            if served(r) {
                ok += 1;
            } else {
                assert!(
                    String::from_utf8_lossy(r).contains(
                        "rate limited: a key is over its limit of 200 requests a second (--key-rate-limit)"
                    ),
                    "{:?}",
                    String::from_utf8_lossy(r)
                );
                refused += 1;
            }
        }
        if with_cold && !served(&replies[20]) {
            cold_refused += 1;
        }
    }
    (ok, refused, cold_refused)
}

/// Reads `n` replies of the protocol.
trait AsyncReplies {
    async fn read(&self, c: &mut Client, n: usize) -> Vec<Vec<u8>>;
}

/// memcached's one-line replies (`STORED`, `SERVER_ERROR …`).
struct Lines;

impl AsyncReplies for Lines {
    async fn read(&self, c: &mut Client, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(c.read_line().await.into_bytes());
        }
        out
    }
}

/// RESP replies.
struct Resp;

impl AsyncReplies for Resp {
    async fn read(&self, c: &mut Client, n: usize) -> Vec<Vec<u8>> {
        read_replies(c, n).await
    }
}

/// A key `hot` floods at 200 a second, with hot-key detection on.
fn limits() -> (HotKeysConfig, RateLimits) {
    (
        HotKeysConfig::new(4),
        RateLimits {
            key: Some(200),
            pool: None,
        },
    )
}

/// How close to its limit a flooded key was served over `secs` seconds (the burst is a tenth of a
/// second's worth; the load starts before the key is tracked, so allow a little more).
fn near_limit(ok: usize, secs: f64) {
    let expected = 200.0 * secs;
    assert!(
        (ok as f64) > expected * 0.9 && (ok as f64) < expected * 1.25,
        "{ok} served in {secs} s at a limit of 200/s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memcached_key_over_its_limit_is_refused_past_it_and_its_neighbours_are_not() {
    let servers = memcacheds(1);
    let mut config = pool_config(&servers);
    (config.remedies.hot_keys, config.rate_limits) = {
        let (h, r) = limits();
        (Some(h), r)
    };
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    // Detection ranks the key within its refresh (100 ms): from then on it is limited.
    let (warm, _, _) = flood(
        &mut c,
        b"set hot 0 0 1\r\nv\r\n",
        b"set cold 0 0 1\r\nw\r\n",
        |r| r == b"STORED\r\n",
        Duration::from_millis(300),
        Lines,
    )
    .await;
    let (ok, refused, cold_refused) = flood(
        &mut c,
        b"set hot 0 0 1\r\nv\r\n",
        b"set cold 0 0 1\r\nw\r\n",
        |r| r == b"STORED\r\n",
        Duration::from_secs(2),
        Lines,
    )
    .await;
    near_limit(ok, 2.0);
    assert!(refused > ok, "flooded well past it: {refused} refused");
    assert_eq!(cold_refused, 0, "a key under its limit is never refused");
    let stats = &proxy.proxy.views()[0].pool;
    assert!(stats.key_rate_limited.get() >= refused as u64);
    let _ = warm;
    // noreply: refused silently, and the stream stays in step.
    let mut batch = Vec::new();
    for _ in 0..200 {
        batch.extend_from_slice(b"set hot 0 0 1 noreply\r\nx\r\n");
    }
    batch.extend_from_slice(b"mn\r\n");
    c.send(&batch).await;
    assert_eq!(c.read_line().await, "MN\r\n");
    assert!(stats.key_rate_limited.get() > refused as u64);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_key_over_its_limit_is_refused_and_the_pool_limit_caps_every_request() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let servers = [server];
    let mut config = redis_pool(&servers, "");
    (config.remedies.hot_keys, config.rate_limits) = {
        let (h, r) = limits();
        (Some(h), r)
    };
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    // Detection ranks the key within its refresh (100 ms): from then on it is limited.
    let (warm, _, _) = flood(
        &mut c,
        b"*2\r\n$4\r\nINCR\r\n$3\r\nhot\r\n",
        b"*2\r\n$4\r\nINCR\r\n$4\r\ncold\r\n",
        |r| r.starts_with(b":"),
        Duration::from_millis(300),
        Resp,
    )
    .await;
    let (ok, refused, cold_refused) = flood(
        &mut c,
        b"*2\r\n$4\r\nINCR\r\n$3\r\nhot\r\n",
        b"*2\r\n$4\r\nINCR\r\n$4\r\ncold\r\n",
        |r| r.starts_with(b":"),
        Duration::from_secs(2),
        Resp,
    )
    .await;
    near_limit(ok, 2.0);
    assert!(refused > ok);
    assert_eq!(cold_refused, 0);
    // Every served INCR reached the server once; no refused one did.
    let total = warm + ok;
    // (Read on the server itself: a GET of the key through the proxy is limited too.)
    let mut server = direct(&servers[0]).await;
    server.send(b"*2\r\n$3\r\nGET\r\n$3\r\nhot\r\n").await;
    let counted = read_replies(&mut server, 1).await.remove(0);
    assert_eq!(
        counted,
        format!("${}\r\n{total}\r\n", total.to_string().len()).into_bytes()
    );
    // MGET with the hot key: the whole request is the error, not an element of its array.
    let mut refused_mget = false;
    for _ in 0..100 {
        c.send(b"*3\r\n$4\r\nMGET\r\n$4\r\ncold\r\n$3\r\nhot\r\n")
            .await;
        let r = read_replies(&mut c, 1).await.remove(0);
        if r.starts_with(b"-ERR rate limited") {
            refused_mget = true;
        } else {
            assert!(
                r.starts_with(b"*2\r\n"),
                "{:?}",
                String::from_utf8_lossy(&r)
            );
        }
    }
    assert!(refused_mget);
    proxy.stop().await;

    // The pool's limit: every request counts, whatever its key.
    let mut config = redis_pool(&servers, "");
    config.rate_limits.pool = Some(100);
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    let started = Instant::now();
    let (mut ok, mut no) = (0, 0);
    while started.elapsed() < Duration::from_secs(1) {
        let mut batch = Vec::new();
        for i in 0..10 {
            batch.extend_from_slice(format!("*2\r\n$3\r\nGET\r\n$2\r\nk{i}\r\n").as_bytes());
        }
        c.send(&batch).await;
        for r in read_replies(&mut c, 10).await {
            if r.starts_with(b"-ERR rate limited: the pool is over its limit of 100") {
                no += 1;
            } else {
                ok += 1;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    assert!(
        (ok as f64) <= 100.0 * secs + 11.0 && (ok as f64) >= 100.0 * secs * 0.9,
        "{ok} served in {secs} s at 100/s"
    );
    assert!(no > 0);
    // The proxy's own answers are never limited.
    for _ in 0..300 {
        c.send(b"*1\r\n$4\r\nPING\r\n").await;
        assert_eq!(read_replies(&mut c, 1).await.remove(0), b"+PONG\r\n");
    }
    proxy.stop().await;
}
