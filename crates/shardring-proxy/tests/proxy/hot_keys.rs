//! Hot keys against real memcached servers: the detector's ranking equals the true ranking of a Zipf
//! load, the hot-key cache takes the top keys' reads off their servers, and writes through the proxy are
//! seen by the next read.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{pool_config, Client, RunningProxy};
use shardring::splitmix::SplitMix64;
use shardring_proxy::config::HotKeysConfig;
use test_support::memcacheds;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Keys in the Zipf load.
const KEYS: usize = 10_000;

/// Zipf(s) over `n` keys: rank r (1-based) is drawn with probability proportional to r^-s.
pub struct Zipf {
    /// The cumulative distribution, rank by rank.
    cdf: Vec<f64>,
    /// The random source (fixed seed: the same load every run).
    rng: SplitMix64,
}

impl Zipf {
    pub fn new(n: usize, s: f64, seed: u64) -> Zipf {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|r| {
                acc += (r as f64).powf(-s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf {
            cdf,
            rng: SplitMix64::new(seed),
        }
    }

    /// A rank, 0-based.
    pub fn next(&mut self) -> usize {
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Each rank drawn in `ranks` with how often, the most drawn first (ties by rank): the true ranking.
pub fn ranked(ranks: &[usize]) -> Vec<(usize, usize)> {
    let mut truth: HashMap<usize, usize> = HashMap::new();
    for &r in ranks {
        *truth.entry(r).or_default() += 1;
    }
    let mut by_count: Vec<(usize, usize)> = truth.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    by_count
}

fn key(rank: usize) -> String {
    format!("zipf:{rank}")
}

/// Stores every key of the load through `addr`.
async fn fill(addr: &str) {
    let mut c = Client::connect(addr).await;
    let mut batch = Vec::new();
    for r in 0..KEYS {
        batch.extend_from_slice(
            format!("set {} 0 0 4 noreply\r\nv{:03}\r\n", key(r), r % 1000).as_bytes(),
        );
    }
    c.send(&batch).await;
    c.check(b"mn\r\n", b"MN\r\n").await;
}

/// Sends `ranks` as one-key gets over `clients` pipelined connections (batches of 64), reading every
/// reply; returns how many were hits.
async fn load(addr: &str, ranks: Vec<usize>, clients: usize) -> usize {
    let chunk = ranks.len().div_ceil(clients);
    let tasks: Vec<_> = ranks
        .chunks(chunk)
        .map(|part| {
            let part = part.to_vec();
            let addr = addr.to_owned();
            tokio::spawn(async move {
                let stream = TcpStream::connect(&addr).await.expect("connect");
                stream.set_nodelay(true).unwrap();
                let (r, mut w) = stream.into_split();
                let mut r = BufReader::new(r);
                let mut hits = 0;
                for batch in part.chunks(64) {
                    let mut req = Vec::new();
                    for &rank in batch {
                        req.extend_from_slice(format!("get {}\r\n", key(rank)).as_bytes());
                    }
                    w.write_all(&req).await.expect("write");
                    for _ in batch {
                        hits += usize::from(read_get_reply(&mut r).await);
                    }
                }
                hits
            })
        })
        .collect();
    let mut hits = 0;
    for t in tasks {
        hits += tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("the load finishes in time")
            .expect("no panic");
    }
    hits
}

/// Reads one reply to a one-key get; true for a hit.
async fn read_get_reply<R: AsyncBufReadExt + Unpin>(r: &mut R) -> bool {
    let mut line = String::new();
    r.read_line(&mut line).await.expect("a reply line");
    if line == "END\r\n" {
        return false;
    }
    assert!(line.starts_with("VALUE "), "unexpected reply {line:?}");
    let len: usize = line.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
    let mut data = vec![0u8; len + 2];
    r.read_exact(&mut data).await.expect("the data block");
    let mut end = String::new();
    r.read_line(&mut end).await.expect("END");
    assert_eq!(end, "END\r\n");
    true
}

/// A pool over `servers` named `mc0`, `mc1`, … (so placement does not depend on the free ports the
/// servers got) with the md5 key hash (well mixed; twemproxy's default fnv1a_64 spreads short keys
/// that differ in their last digits unevenly, which would blur what the cache does).
fn named_pool(servers: &[test_support::Memcached]) -> shardring_proxy::PoolConfig {
    let specs: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, m)| format!("{}:1 mc{i}", m.addr))
        .collect();
    let refs: Vec<&str> = specs.iter().map(String::as_str).collect();
    let mut pool = shardring_proxy::PoolConfig::new("alpha", "127.0.0.1:0", &refs).unwrap();
    pool.hash = shardring_proxy::config::TwemproxyHash::Md5;
    pool
}

/// Each server's requests, in config order.
pub fn server_requests(proxy: &RunningProxy) -> Vec<u64> {
    proxy.proxy.views()[0]
        .servers
        .iter()
        .map(|s| s.requests.get())
        .collect()
}

/// The busiest server's requests over the mean, between two readings.
pub fn busiest_over_mean(before: &[u64], after: &[u64]) -> f64 {
    let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    eprintln!("server requests: {d:?}");
    let mean = d.iter().sum::<u64>() as f64 / d.len() as f64;
    *d.iter().max().unwrap() as f64 / mean
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zipf_load_finds_the_true_top_ten_and_the_hot_cache_evens_out_the_servers() {
    let servers = memcacheds(20);
    let mut zipf = Zipf::new(KEYS, 1.1, 14);
    let ranks: Vec<usize> = (0..200_000).map(|_| zipf.next()).collect();
    let by_count = ranked(&ranks);
    let true_top: Vec<String> = by_count[..10].iter().map(|&(r, _)| key(r)).collect();

    // Detection only: the ranking, and the imbalance it reveals.
    let mut config = named_pool(&servers);
    let mut hot = HotKeysConfig::new(100);
    hot.window = Duration::from_secs(600);
    config.remedies.hot_keys = Some(hot.clone());
    let proxy = RunningProxy::start(config).await;
    fill(&proxy.addr).await;
    let before = server_requests(&proxy);
    let hits = load(&proxy.addr, ranks.clone(), 4).await;
    assert_eq!(hits, ranks.len(), "every key was stored");
    let plain = busiest_over_mean(&before, &server_requests(&proxy));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = proxy.proxy.views()[0]
        .pool
        .hot_keys
        .load_full()
        .expect("a ranking is published");
    let mut found: Vec<String> = report.keys[..10].iter().map(|k| k.key.clone()).collect();
    let mut want = true_top.clone();
    found.sort();
    want.sort();
    assert_eq!(found, want, "the detector's top 10 is the true top 10");
    let first = &report.keys[0];
    assert_eq!(first.key, true_top[0]);
    let first_truth = by_count[0].1 as u64;
    assert!(
        first.count >= first_truth && first.count <= first_truth + first_truth / 50,
        "the top count {} is the true {first_truth} or a little above",
        first.count
    );
    let owner = proxy.proxy.pools()[0]
        .server_for(first.key.as_bytes())
        .unwrap();
    assert_eq!(
        first.server.as_deref(),
        Some(format!("mc{owner}").as_str()),
        "each key is shown with its server"
    );
    proxy.stop().await;

    // With the cache: the top keys' reads stay in the proxy.
    let mut config = named_pool(&servers);
    hot.cache_ttl = Some(Duration::from_millis(100));
    config.remedies.hot_keys = Some(hot);
    let proxy = RunningProxy::start(config).await;
    load(&proxy.addr, ranks[..20_000].to_vec(), 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = server_requests(&proxy);
    let hits = load(&proxy.addr, ranks.clone(), 4).await;
    assert_eq!(hits, ranks.len(), "cached or not, every read is a hit");
    let cached = busiest_over_mean(&before, &server_requests(&proxy));
    let stats = &proxy.proxy.views()[0].pool;
    eprintln!(
        "busiest server / mean: {plain:.2} without the hot cache, {cached:.2} with it \
         ({} cache hits, {} fills of 200000 gets)",
        stats.hot_cache_hits.get(),
        stats.hot_cache_fills.get()
    );
    assert!(
        plain >= 3.0,
        "without the cache the hot key's server carries {plain:.2}x the mean"
    );
    assert!(
        cached <= 1.5,
        "with the cache the busiest server carries {cached:.2}x the mean"
    );
    proxy.stop().await;
}

/// Reads `key` through the proxy until the cache serves it (bounded), so the test knows it is cached.
async fn until_cached(c: &mut Client, proxy: &RunningProxy, key: &str, reply: &str) {
    let hits = || proxy.proxy.views()[0].pool.hot_cache_hits.get();
    let start = hits();
    for _ in 0..200 {
        for _ in 0..50 {
            c.check(format!("get {key}\r\n").as_bytes(), reply.as_bytes())
                .await;
        }
        if hits() > start {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{key} was never served from the hot-key cache");
}

#[tokio::test]
async fn a_write_through_the_proxy_is_visible_on_the_next_read() {
    let servers = memcacheds(1);
    let mut config = pool_config(&servers);
    let mut hot = HotKeysConfig::new(4);
    // A long TTL, so a stale read would show.
    hot.cache_ttl = Some(Duration::from_secs(30));
    config.remedies.hot_keys = Some(hot);
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    c.check(b"set hot 5 0 3\r\none\r\n", b"STORED\r\n").await;
    until_cached(&mut c, &proxy, "hot", "VALUE hot 5 3\r\none\r\nEND\r\n").await;

    c.check(b"set hot 6 0 3\r\ntwo\r\n", b"STORED\r\n").await;
    c.check(b"get hot\r\n", b"VALUE hot 6 3\r\ntwo\r\nEND\r\n")
        .await;
    until_cached(&mut c, &proxy, "hot", "VALUE hot 6 3\r\ntwo\r\nEND\r\n").await;

    // Another client, a noreply write, then a meta write: each seen at once.
    let mut other = proxy.client().await;
    other.send(b"append hot 0 0 1 noreply\r\n!\r\n").await;
    other.check(b"mn\r\n", b"MN\r\n").await;
    c.check(b"get hot\r\n", b"VALUE hot 6 4\r\ntwo!\r\nEND\r\n")
        .await;
    until_cached(&mut c, &proxy, "hot", "VALUE hot 6 4\r\ntwo!\r\nEND\r\n").await;
    other.check(b"md hot\r\n", b"HD\r\n").await;
    c.check(b"get hot\r\n", b"END\r\n").await;
    assert!(proxy.proxy.views()[0].pool.hot_cache_invalidations.get() >= 3);

    // flush_all clears it too.
    c.check(b"set hot 0 0 1\r\nx\r\n", b"STORED\r\n").await;
    until_cached(&mut c, &proxy, "hot", "VALUE hot 0 1\r\nx\r\nEND\r\n").await;
    c.check(b"flush_all\r\n", b"OK\r\n").await;
    c.check(b"get hot\r\n", b"END\r\n").await;
    proxy.stop().await;
}

#[tokio::test]
async fn a_write_behind_the_proxys_back_is_seen_within_the_ttl() {
    let servers = memcacheds(1);
    let mut config = pool_config(&servers);
    let mut hot = HotKeysConfig::new(4);
    hot.cache_ttl = Some(Duration::from_millis(100));
    config.remedies.hot_keys = Some(hot);
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    c.check(b"set k 0 0 3\r\nold\r\n", b"STORED\r\n").await;
    until_cached(&mut c, &proxy, "k", "VALUE k 0 3\r\nold\r\nEND\r\n").await;
    let mut direct = Client::connect(&servers[0].addr).await;
    direct.check(b"set k 0 0 3\r\nnew\r\n", b"STORED\r\n").await;
    let written = std::time::Instant::now();
    loop {
        let mut got = Vec::new();
        c.send(b"get k\r\n").await;
        got.extend(c.read_n(b"VALUE k 0 3\r\n".len() + 5 + 5).await);
        if got == b"VALUE k 0 3\r\nnew\r\nEND\r\n" {
            break;
        }
        assert_eq!(got, b"VALUE k 0 3\r\nold\r\nEND\r\n");
        // The bound is the TTL plus how late the coarse clock's ticker runs; on a busy machine that
        // can be tens of milliseconds, so the check allows a second.
        assert!(
            written.elapsed() < Duration::from_secs(1),
            "a stale value was served {:?} after the write, far past the 100 ms TTL",
            written.elapsed()
        );
    }
    proxy.stop().await;
}

/// The ranking is at `/hotkeys`, and not in the stats JSON: nutcracker's readers take every object in
/// a pool for a server. The hot-key cache's counters, scalars, stay there.
#[tokio::test]
async fn hot_keys_are_served_at_slash_hotkeys_and_kept_out_of_the_stats_json() {
    let servers = memcacheds(2);
    let mut config = pool_config(&servers);
    config.remedies.hot_keys = Some(HotKeysConfig::new(2));
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    for (key, n) in [("a", 30), ("b", 20), ("c", 10), ("d", 1)] {
        for _ in 0..n {
            c.check(format!("get {key}\r\n").as_bytes(), b"END\r\n")
                .await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let p = std::sync::Arc::clone(&proxy.proxy);
    let task = tokio::spawn(shardring_proxy::metrics::serve_prometheus(
        listener,
        std::time::Instant::now(),
        move || p.views(),
        stop.clone(),
    ));
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /hotkeys HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut text))
        .await
        .expect("an answer in time")
        .unwrap();
    let body = text.split("\r\n\r\n").nth(1).expect("a body");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let pool = &v["pools"][0];
    assert_eq!(pool["pool"], "alpha");
    let keys: Vec<(&str, u64)> = pool["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap(), k["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(keys, [("a", 30), ("b", 20)]);
    let owner = proxy.proxy.pools()[0].server_for(b"a").unwrap();
    assert_eq!(pool["keys"][0]["server"], servers[owner].addr.as_str());

    let json: serde_json::Value =
        serde_json::from_str(&shardring_proxy::metrics::render_twemproxy_json(
            std::time::Instant::now(),
            &proxy.proxy.views(),
        ))
        .unwrap();
    assert!(json["alpha"].get("hot_keys").is_none(), "{json}");
    assert_eq!(json["alpha"]["hot_cache_hits"], 0);
    stop.cancel();
    let _ = task.await;
    proxy.stop().await;
}
