//! The proxy with its servers from a real etcd (`--etcd`): under load while membership changes, zero
//! misrouted or lost replies and keys of unchanged servers never move; etcd killed and restarted while
//! the proxy serves; an empty pool refused; unreachable etcd at start (error, or the file's servers).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{pool_config, Client, RunningProxy};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring::hash::TwemproxyHash;
use shardring::membership::Member;
use shardring::Ring;
use shardring_etcd::{admin, twemproxy_ketama, EtcdSource};
use shardring_proxy::membership::{self, EtcdMembership, MembershipStartError, MembershipStats};
use test_support::{etcd_available, Etcd, Relay};
use test_support::{memcacheds, Memcached};
use tokio_util::sync::CancellationToken;

fn member(m: &Memcached) -> Member {
    let server: TwemproxyServer = m.server_spec().parse().unwrap();
    Member::from_twemproxy(&server).unwrap()
}

fn ring(members: &[Member]) -> Ring {
    twemproxy_ketama(members, TwemproxyHash::Fnv1a64, None).unwrap()
}

fn source(etcd: &Etcd) -> EtcdSource {
    EtcdSource::builder(&[etcd.url()], "alpha").build()
}

fn settings(url: String) -> EtcdMembership {
    EtcdMembership::new([url])
        .debounce(Duration::from_millis(20))
        .retry_max(Duration::from_millis(300))
}

/// Waits for `done`, polling every 5 ms for at most 10 s; fails with `what` if it never holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn wait_revision(stats: &MembershipStats, revision: i64) {
    eventually(&format!("the proxy reaches revision {revision}"), || {
        stats.revision() >= revision as u64
    })
    .await;
}

/// Publishes `servers` as the pool's members in `etcd`; the write's revision.
async fn publish(etcd: &Etcd, servers: &[Memcached]) -> i64 {
    admin::publish(
        &source(etcd),
        &servers.iter().map(member).collect::<Vec<_>>(),
    )
    .await
    .unwrap()
    .revision
}

/// Starts following etcd for every pool of `proxy`; each pool's tallies, and the token that stops it.
async fn follow(
    proxy: &RunningProxy,
    settings: &EtcdMembership,
) -> (Vec<Arc<MembershipStats>>, CancellationToken) {
    let stop = CancellationToken::new();
    let stats = membership::start(proxy.proxy.pools(), settings, stop.clone())
        .await
        .unwrap();
    (stats, stop)
}

/// The value stored under `key`: the key itself, so a reply for another key cannot pass for it.
fn value_of(key: &str) -> String {
    format!("v-{key}")
}

async fn set(c: &mut Client, key: &str) -> String {
    let v = value_of(key);
    c.send(format!("set {key} 0 0 {}\r\n{v}\r\n", v.len()).as_bytes())
        .await;
    c.read_line().await
}

/// `Some(true)` for a hit with the right value, `Some(false)` for a miss; panics on a wrong value.
async fn get(c: &mut Client, key: &str) -> Result<bool, String> {
    c.send(format!("get {key}\r\n").as_bytes()).await;
    let line = c.read_line().await;
    if line == "END\r\n" {
        return Ok(false);
    }
    let v = value_of(key);
    if line != format!("VALUE {key} 0 {}\r\n", v.len()) {
        return Err(format!("get {key}: {line:?}"));
    }
    let data = c.read_n(v.len() + 2).await;
    let end = c.read_line().await;
    if data != format!("{v}\r\n").as_bytes() || end != "END\r\n" {
        return Err(format!(
            "get {key}: wrong data {:?}",
            String::from_utf8_lossy(&data)
        ));
    }
    Ok(true)
}

/// Which of `servers` hold `key`, asked directly.
async fn holders(servers: &[Memcached], key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for s in servers {
        let mut c = Client::connect(&s.addr).await;
        if get(&mut c, key).await.unwrap() {
            out.push(s.addr.clone());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_membership_changes_lose_and_misroute_nothing_and_move_only_what_the_diff_says()
{
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let servers = memcacheds(4);
    let src = source(&etcd);
    let three: Vec<Member> = servers[..3].iter().map(member).collect();
    let four: Vec<Member> = servers.iter().map(member).collect();
    admin::publish(&src, &three).await.unwrap();
    // The file lists the same three servers; etcd is the source from now on.
    let proxy = RunningProxy::start(pool_config(&servers[..3])).await;
    let (stats, stop) = follow(&proxy, &settings(etcd.url())).await;
    let stats = &stats[0];

    // Keys written before any change, each checked on the server the ring says.
    let keys: Vec<String> = (0..400).map(|i| format!("stable:{i}")).collect();
    let mut c = proxy.client().await;
    for k in &keys {
        assert_eq!(set(&mut c, k).await, "STORED\r\n");
    }
    let before = ring(&three);
    for k in keys.iter().step_by(20) {
        assert_eq!(
            holders(&servers, k).await,
            vec![before.lookup(k).unwrap().name().to_string()],
            "{k} is where the ring puts it"
        );
    }

    // Load: two clients set and get their own keys without pause while membership changes.
    let running = Arc::new(AtomicBool::new(true));
    let (requests, misses) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load: Vec<_> = (0..2)
        .map(|t| {
            let (addr, running) = (proxy.addr.clone(), Arc::clone(&running));
            let (requests, misses) = (Arc::clone(&requests), Arc::clone(&misses));
            tokio::spawn(async move {
                let mut c = Client::connect(&addr).await;
                let mut i = 0u64;
                while running.load(Ordering::Relaxed) {
                    let key = format!("load:{t}:{}", i % 500);
                    assert_eq!(set(&mut c, &key).await, "STORED\r\n", "set {key}");
                    match get(&mut c, &key).await {
                        Ok(true) => {}
                        // The ring changed between the set and the get: a miss, never a wrong value.
                        Ok(false) => {
                            misses.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("misrouted: {e}"),
                    }
                    requests.fetch_add(2, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();

    // Add the fourth server, then take it out again, twice; each change checked against the ring diff.
    for round in 0..2 {
        let revision = admin::put_member(&src, &member(&servers[3]), None)
            .await
            .unwrap();
        wait_revision(stats, revision).await;
        let after = ring(&four);
        let plan = before.migration_to(&after);
        assert!(!plan.is_empty());
        for m in &plan {
            // Equal weights: an added server only takes keys; nobody else's keys move.
            assert_eq!(
                m.to.as_deref(),
                Some(servers[3].addr.as_str()),
                "round {round}: {m:?}"
            );
        }
        let mut c = proxy.client().await;
        for k in &keys {
            let owner = after.lookup(k).unwrap().name().to_string();
            let hit = get(&mut c, k).await.unwrap();
            // Keys of unchanged servers never move: every one still hits where it was.
            assert_eq!(
                hit,
                owner != servers[3].addr,
                "round {round}: {k} on {owner}"
            );
        }
        let revision = admin::remove_member(&src, &servers[3].addr).await.unwrap();
        wait_revision(stats, revision).await;
        for m in &after.migration_to(&before) {
            assert_eq!(m.from.as_deref(), Some(servers[3].addr.as_str()));
        }
        for k in &keys {
            assert!(
                get(&mut c, k).await.unwrap(),
                "round {round}: {k} is back where it was"
            );
        }
        // The load goes on between rounds: wait until it has made some requests on this membership.
        let so_far = requests.load(Ordering::Relaxed);
        eventually("the load's requests between rounds", || {
            requests.load(Ordering::Relaxed) >= so_far + 60
        })
        .await;
    }
    running.store(false, Ordering::Relaxed);
    for l in load {
        l.await.expect("no lost or misrouted reply");
    }
    eprintln!(
        "load: {} requests, {} misses across 4 membership changes",
        requests.load(Ordering::Relaxed),
        misses.load(Ordering::Relaxed)
    );
    assert!(requests.load(Ordering::Relaxed) > 200, "the load ran");
    // Misses come only from keys that moved to or from the fourth server mid-flight: a few.
    assert!(misses.load(Ordering::Relaxed) * 10 < requests.load(Ordering::Relaxed));
    assert_eq!(stats.errors(), 0);
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_mid_run_the_proxy_keeps_serving_then_catches_up() {
    if !etcd_available() {
        return;
    }
    let mut etcd = Etcd::start();
    let servers = memcacheds(3);
    let src = source(&etcd);
    publish(&etcd, &servers[..2]).await;
    let proxy = RunningProxy::start(pool_config(&servers[..2])).await;
    let (stats, stop) = follow(&proxy, &settings(etcd.url())).await;
    let mut c = proxy.client().await;
    assert_eq!(set(&mut c, "k").await, "STORED\r\n");

    etcd.kill();
    eventually("the loss is counted", || stats[0].errors() > 0).await;
    // Serving goes on with the last servers.
    for i in 0..50 {
        let key = format!("while-down:{i}");
        assert_eq!(set(&mut c, &key).await, "STORED\r\n");
        assert!(get(&mut c, &key).await.unwrap());
    }
    etcd.restart();
    let revision = admin::put_member(&src, &member(&servers[2]), None)
        .await
        .unwrap();
    wait_revision(&stats[0], revision).await;
    assert_eq!(proxy.proxy.pools()[0].config().servers.len(), 3);
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_reload_keeps_the_servers_from_etcd() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let servers = memcacheds(3);
    publish(&etcd, &servers).await;
    // The file lists two servers; etcd has three.
    let proxy = RunningProxy::start(pool_config(&servers[..2])).await;
    let (_stats, stop) = follow(&proxy, &settings(etcd.url())).await;
    let pools = proxy.proxy.pools();
    assert_eq!(pools[0].config().servers.len(), 3);
    let mut reread = pool_config(&servers[..2]);
    reread.server_retry_timeout = Duration::from_secs(7);
    let config = membership::keep_servers(
        pools,
        shardring_proxy::ProxyConfig {
            pools: vec![reread],
        },
    );
    proxy.proxy.reload(config).unwrap();
    let now = pools[0].config();
    assert_eq!(now.servers.len(), 3, "the servers stay etcd's");
    assert_eq!(
        now.server_retry_timeout,
        Duration::from_secs(7),
        "the file's settings apply"
    );
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_pool_in_etcd_is_refused_and_the_servers_kept() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let servers = memcacheds(2);
    let src = source(&etcd);
    // Nothing in etcd at start: an error, or the file's servers with --etcd-fallback.
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let err = membership::start(
        proxy.proxy.pools(),
        &settings(etcd.url()),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, MembershipStartError::Empty { .. }), "{err}");
    let (stats, stop) = follow(&proxy, &settings(etcd.url()).fallback(true)).await;
    let revision = publish(&etcd, &servers).await;
    wait_revision(&stats[0], revision).await;
    // One bad delete of the whole pool: refused, counted, servers kept.
    let mut client = admin::client(&src).await.unwrap();
    client
        .delete(
            src.keys().servers_prefix(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    eventually("the empty snapshot is counted", || stats[0].errors() >= 2).await;
    assert_eq!(proxy.proxy.pools()[0].config().servers.len(), 2);
    let mut c = proxy.client().await;
    assert_eq!(set(&mut c, "still").await, "STORED\r\n");
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_etcd_at_start_is_an_error_or_the_files_servers() {
    let servers = memcacheds(1);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let url = format!("http://127.0.0.1:{}", test_support::free_port());
    let err = membership::start(
        proxy.proxy.pools(),
        &settings(url.clone()),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, MembershipStartError::Unreachable { .. }),
        "{err}"
    );
    let (stats, stop) = follow(&proxy, &settings(url).fallback(true)).await;
    assert!(stats[0].errors() >= 1);
    let mut c = proxy.client().await;
    assert_eq!(set(&mut c, "k").await, "STORED\r\n");
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fallback_the_proxy_starts_on_the_files_servers_and_takes_etcds_once_reachable() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let servers = memcacheds(3);
    publish(&etcd, &servers).await;
    // etcd is there but cut off from the proxy at start.
    let relay = Relay::start(format!("127.0.0.1:{}", etcd.client_port)).await;
    relay.cut();
    let proxy = RunningProxy::start(pool_config(&servers[..1])).await;
    let (stats, stop) = follow(&proxy, &settings(relay.url()).fallback(true)).await;
    let pools = proxy.proxy.pools();
    assert_eq!(pools[0].config().servers.len(), 1);
    let mut c = proxy.client().await;
    assert_eq!(set(&mut c, "early").await, "STORED\r\n");
    relay.restore();
    eventually("the retries reach etcd", || {
        pools[0].config().servers.len() == 3
    })
    .await;
    assert!(stats[0].revision() > 0);
    assert!(stats[0].updated_unix() > 0);
    stop.cancel();
    proxy.stop().await;
}
