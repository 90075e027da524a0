//! The gutter pool against real memcached servers: a dead server's keys go to the gutter (one miss
//! each, TTLs capped) instead of to the other servers, and back to the server when it returns.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::{pool_config, Client, RunningProxy};
use shardring_proxy::config::GutterConfig;
use test_support::{memcacheds, Memcached};

const KEYS: usize = 1500;

fn key(i: usize) -> String {
    format!("gut:{i}")
}

/// Look-aside reads of every key: a miss is filled with `set … 0` (no expiry) as a client would.
/// Returns the misses.
async fn look_aside(c: &mut Client) -> usize {
    let mut misses = 0;
    for i in 0..KEYS {
        c.send(format!("get {}\r\n", key(i)).as_bytes()).await;
        let line = c.read_line().await;
        if line == "END\r\n" {
            misses += 1;
            c.check(
                format!("set {} 0 0 5\r\nv{:04}\r\n", key(i), i).as_bytes(),
                b"STORED\r\n",
            )
            .await;
        } else {
            assert!(line.starts_with("VALUE "), "{line:?}");
            c.read_line().await;
            assert_eq!(c.read_line().await, "END\r\n");
        }
    }
    misses
}

fn requests(proxy: &RunningProxy) -> Vec<u64> {
    proxy.proxy.views()[0]
        .servers
        .iter()
        .map(|s| s.requests.get())
        .collect()
}

/// Waits until `server` is ejected (or back) in the stats and in the routing: the control thread
/// rebuilds the placement after the flag flips, and a request routed in between still goes to the
/// server. `its_key` is a key the server owns when live.
async fn until_ejected(proxy: &RunningProxy, server: usize, ejected: bool, its_key: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let settled = || {
        let flag = proxy.proxy.views()[0].servers[server]
            .ejected
            .load(Ordering::Relaxed);
        let routed_to_it = proxy.proxy.pools()[0].server_for(its_key.as_bytes()) == Some(server);
        flag == ejected && routed_to_it != ejected
    };
    while !settled() {
        assert!(
            Instant::now() < deadline,
            "server {server} ejected={ejected} in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_dead_servers_keys_are_served_from_the_gutter_after_one_miss_each() {
    let mut servers = memcacheds(3);
    let gutter = memcacheds(1);
    let mut config = pool_config(&servers);
    config.auto_eject_hosts = true;
    config.server_failure_limit = 1;
    config.server_retry_timeout = Duration::from_millis(300);
    config.health_check_interval = Duration::from_millis(100);
    config.timeout = Some(Duration::from_secs(1));
    config.memcache_mut().unwrap().remedies.gutter = Some(GutterConfig {
        servers: vec![gutter[0].server_spec().parse().unwrap()],
        ttl_cap: 5,
    });
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    assert_eq!(
        look_aside(&mut c).await,
        KEYS,
        "the first pass fills every key"
    );
    assert_eq!(look_aside(&mut c).await, 0);
    let pool = &proxy.proxy.pools()[0];
    let owner: Vec<usize> = (0..KEYS)
        .map(|i| pool.server_for(key(i).as_bytes()).unwrap())
        .collect();
    let owned = |s: usize| owner.iter().filter(|&&o| o == s).count() as u64;

    let its_key = key(owner.iter().position(|&o| o == 1).unwrap());
    servers[1].kill();
    until_ejected(&proxy, 1, true, &its_key).await;
    let before = requests(&proxy);
    let first = look_aside(&mut c).await;
    let second = look_aside(&mut c).await;
    let after = requests(&proxy);
    assert_eq!(
        first as u64,
        owned(1),
        "one miss for each key of the dead server"
    );
    assert_eq!(second, 0, "then the gutter serves them");
    for s in [0, 2] {
        assert_eq!(
            after[s] - before[s],
            2 * owned(s),
            "server {s} gets only its own keys' reads: nothing is rehashed onto it"
        );
    }
    assert_eq!(
        after[3] - before[3],
        3 * owned(1),
        "gutter: get, set, get per key"
    );
    assert_eq!(
        proxy.proxy.views()[0].pool.gutter_requests.get(),
        3 * owned(1)
    );

    // TTLs in the gutter are at most the cap (the client asked for no expiry).
    let mut g = Client::connect(&gutter[0].addr).await;
    g.send(format!("mg {its_key} t\r\n").as_bytes()).await;
    let line = g.read_line().await;
    let ttl: i64 = line
        .trim_end()
        .strip_prefix("HD t")
        .expect("a TTL")
        .parse()
        .unwrap();
    assert!((1..=5).contains(&ttl), "TTL {ttl} is at most the 5 s cap");

    // Back: its keys go to it again (empty, so one miss each), not to the gutter.
    servers[1] = Memcached::start_on(servers[1].port);
    until_ejected(&proxy, 1, false, &its_key).await;
    let before = requests(&proxy);
    assert_eq!(look_aside(&mut c).await as u64, owned(1));
    let after = requests(&proxy);
    assert_eq!(after[3], before[3], "the gutter is out of the path");
    assert_eq!(
        after[1] - before[1],
        2 * owned(1),
        "get and set on the server"
    );
    proxy.stop().await;
}
