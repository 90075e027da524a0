//! Hot keys in redis pools against real redis-servers: the detector's top 10 under a Zipf load is the
//! true top 10, the cache takes the top keys' `GET`s off their servers, and any write through the
//! proxy is seen by the next read. Skipped outside CI when redis-server is missing.

use std::time::Duration;

use crate::common::RunningProxy;
use crate::hot_keys::{busiest_over_mean, ranked, server_requests, Zipf};
use crate::redis_common::{cmds, read_replies};
use shardring_proxy::config::{HotKeysConfig, PoolConfig, ProtocolConfig};
use shardring_proxy::protocol::redis::Request;
use test_support::redis::{bulk, redises, RedisServer};

const KEYS: usize = 10_000;

fn key(rank: usize) -> String {
    format!("zipf:{rank}")
}

/// A pool over `servers`, weighted alike and named `rd0`, `rd1`, … (so placement does not depend on
/// the free ports), with the md5 key hash (well mixed) and these hot-key settings.
fn hot_pool(servers: &[RedisServer], hot: HotKeysConfig) -> PoolConfig {
    let specs: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}:1 rd{i}", s.addr))
        .collect();
    let refs: Vec<&str> = specs.iter().map(String::as_str).collect();
    let mut config = PoolConfig::new("alpha", "127.0.0.1:0", &refs).expect("a pool");
    config.hash = shardring_proxy::config::TwemproxyHash::Md5;
    config.protocol = ProtocolConfig::Redis(shardring_proxy::config::RedisConfig::default());
    config.remedies.hot_keys = Some(hot);
    config
}

/// GETs of `ranks` over `clients` connections, pipelined 64 at a time; every reply must be a hit.
async fn load(proxy: &RunningProxy, ranks: &[usize], clients: usize) {
    let chunk = ranks.len().div_ceil(clients);
    let mut tasks = Vec::new();
    for part in ranks.chunks(chunk) {
        let part = part.to_vec();
        let mut c = proxy.client().await;
        tasks.push(tokio::spawn(async move {
            for batch in part.chunks(64) {
                let mut out = Vec::new();
                for &r in batch {
                    out.extend_from_slice(&Request::from_args(&["GET", &key(r)]).frame);
                }
                c.send(&out).await;
                for reply in read_replies(&mut c, batch.len()).await {
                    assert!(
                        reply.starts_with(b"$4\r\n"),
                        "{:?}",
                        String::from_utf8_lossy(&reply)
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("no panic");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zipf_load_finds_the_true_top_ten_and_the_hot_cache_evens_out_the_servers() {
    let Some(servers) = redises(8, &[]) else {
        return;
    };
    let mut zipf = Zipf::new(KEYS, 1.1, 27);
    let ranks: Vec<usize> = (0..100_000).map(|_| zipf.next()).collect();
    let by_count = ranked(&ranks);
    let mut true_top: Vec<String> = by_count[..10].iter().map(|&(r, _)| key(r)).collect();

    let mut hot = HotKeysConfig::new(100);
    hot.window = Duration::from_secs(600);
    let proxy = RunningProxy::start(hot_pool(&servers, hot.clone())).await;
    let mut c = proxy.client().await;
    let mut out = Vec::new();
    for r in 0..KEYS {
        out.extend_from_slice(
            &Request::from_args(&["SET", &key(r), &format!("v{:03}", r % 1000)]).frame,
        );
    }
    c.send(&out).await;
    read_replies(&mut c, KEYS).await;
    let before = server_requests(&proxy);
    load(&proxy, &ranks, 4).await;
    let plain = busiest_over_mean(&before, &server_requests(&proxy));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = proxy.proxy.views()[0]
        .pool
        .hot_keys
        .load_full()
        .expect("a ranking");
    let mut found: Vec<String> = report.keys[..10].iter().map(|k| k.key.clone()).collect();
    found.sort();
    true_top.sort();
    assert_eq!(found, true_top, "the detector's top 10 is the true top 10");
    proxy.stop().await;

    hot.cache_ttl = Some(Duration::from_millis(100));
    let proxy = RunningProxy::start(hot_pool(&servers, hot)).await;
    load(&proxy, &ranks[..20_000], 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = server_requests(&proxy);
    load(&proxy, &ranks, 4).await;
    let cached = busiest_over_mean(&before, &server_requests(&proxy));
    let stats = &proxy.proxy.views()[0].pool;
    eprintln!(
        "busiest / mean: {plain:.2} without the cache, {cached:.2} with it ({} hits, {} fills)",
        stats.hot_cache_hits.get(),
        stats.hot_cache_fills.get()
    );
    assert!(
        plain >= 1.8,
        "without the cache the busiest server carries {plain:.2}x the mean"
    );
    assert!(
        cached <= 1.5,
        "with the cache the busiest server carries {cached:.2}x the mean"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_through_the_proxy_is_seen_by_the_next_read() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let mut hot = HotKeysConfig::new(10);
    hot.cache_ttl = Some(Duration::from_secs(60));
    let proxy = RunningProxy::start(hot_pool(&servers, hot)).await;
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["SET", "{h}k", "1"]).await, "+OK\r\n");
    let hits = || proxy.proxy.views()[0].pool.hot_cache_hits.get();
    // Reads make it hot (at the detector's next ranking) and then cached.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while hits() < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the hot key is never served from the cache"
        );
        assert_eq!(cmds(&mut c, &["GET", "{h}k"]).await, bulk("1"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let writes: &[(&[&str], &str)] = &[
        (&["SET", "{h}k", "2"], "2"),
        (&["APPEND", "{h}k", "x"], "2x"),
        (&["MSET", "{h}k", "3", "{h}other", "o"], "3"),
        (&["INCR", "{h}k"], "4"),
        (
            &[
                "EVAL",
                "return redis.call('SET', KEYS[1], '5')",
                "1",
                "{h}k",
            ],
            "5",
        ),
    ];
    for (write, then) in writes {
        cmds(&mut c, write).await;
        for _ in 0..20 {
            assert_eq!(
                cmds(&mut c, &["GET", "{h}k"]).await,
                bulk(then),
                "after {write:?}"
            );
        }
    }
    // A transaction's writes too.
    c.send(
        &[
            Request::from_args(&["MULTI"]).frame,
            Request::from_args(&["SET", "{h}k", "6"]).frame,
            Request::from_args(&["EXEC"]).frame,
        ]
        .concat(),
    )
    .await;
    read_replies(&mut c, 3).await;
    assert_eq!(cmds(&mut c, &["GET", "{h}k"]).await, bulk("6"));
    assert_eq!(cmds(&mut c, &["DEL", "{h}k"]).await, ":1\r\n");
    assert_eq!(cmds(&mut c, &["GET", "{h}k"]).await, "$-1\r\n");
    assert!(proxy.proxy.views()[0].pool.hot_cache_invalidations.get() >= 6);
    proxy.stop().await;
}
