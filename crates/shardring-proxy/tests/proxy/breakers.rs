//! Circuit breakers against real servers, memcached and redis-server: a paused server (SIGSTOP,
//! connections open, nothing answered) is ejected while it stalls, what was in flight to it is
//! failed then, its keys then get a fast error naming it while every other key is served, and one
//! probe brings it back once it answers; the
//! pending cap refuses at once what would queue behind a stalled server.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::{pool_config, Client, RunningProxy};
use crate::redis_common::{cmds, pool as redis_pool};
use shardring_proxy::config::BreakerConfig;
use test_support::memcacheds;
use test_support::redis::RedisServer;

/// Breakers that eject after two stalls of 100 ms, for 400 ms at first.
fn quick() -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: 2,
        slow: Some(Duration::from_millis(100)),
        base_ejection: Duration::from_millis(400),
        ..BreakerConfig::default()
    }
}

/// A key the running proxy's pool places on server `index`, and one it places elsewhere.
fn keys_on(proxy: &RunningProxy, index: usize) -> (String, String) {
    let pool = &proxy.proxy.pools()[0];
    let find = |on: bool| {
        (0..)
            .map(|i| format!("key{i}"))
            .find(|k| (pool.server_for(k.as_bytes()) == Some(index)) == on)
            .unwrap()
    };
    (find(true), find(false))
}

/// Sends `request` on a new client and reads one line; how long that took.
async fn timed_line(addr: &str, request: &[u8]) -> (String, Duration) {
    let mut c = Client::connect(addr).await;
    let started = Instant::now();
    c.send(request).await;
    let line = c.read_line().await;
    (line, started.elapsed())
}

/// Stalls `n` requests for `key` on the paused server, on clients of their own 30 ms apart (each
/// its own batch on the server's connection), without waiting for their answers.
async fn stall(addr: &str, request: Vec<u8>, n: usize) -> Vec<tokio::task::JoinHandle<String>> {
    let mut waiting = Vec::new();
    for _ in 0..n {
        let addr = addr.to_owned();
        let request = request.clone();
        waiting.push(tokio::spawn(async move {
            let mut c = Client::connect(&addr).await;
            c.send(&request).await;
            c.read_line().await
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    waiting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_memcached_is_ejected_its_keys_fail_fast_and_one_probe_brings_it_back() {
    let servers = memcacheds(3);
    let mut config = pool_config(&servers);
    config.timeout = Some(Duration::from_secs(3));
    config.breakers = Some(quick());
    let proxy = RunningProxy::start(config).await;
    let (victim, other) = keys_on(&proxy, 1);
    let mut c = proxy.client().await;
    for k in [&victim, &other] {
        c.check(format!("set {k} 0 0 1\r\nv\r\n").as_bytes(), b"STORED\r\n")
            .await;
    }
    let stats = proxy.proxy.views()[0].servers[1].clone();

    servers[1].pause();
    let get = format!("get {victim}\r\n").into_bytes();
    let waiting = stall(&proxy.addr, get.clone(), 3).await;
    test_support::wait_until("the ejection", Duration::from_secs(3), || {
        stats.outlier_ejected.load(Ordering::Relaxed)
    })
    .await;
    // Its keys: a fast error that names the server and why.
    let (line, took) = timed_line(&proxy.addr, &get).await;
    assert!(
        line.starts_with("SERVER_ERROR circuit open for ") && line.contains(&servers[1].addr),
        "{line:?}"
    );
    assert!(line.contains("consecutive failures"), "{line:?}");
    assert!(took < Duration::from_millis(50), "fast: {took:?}");
    // Every other key: served as before.
    let (line, _) = timed_line(&proxy.addr, format!("get {other}\r\n").as_bytes()).await;
    assert_eq!(line, format!("VALUE {other} 0 1\r\n"));
    assert!(stats.breaker_rejected.get() >= 1);
    assert_eq!(stats.outlier_ejections.get(), 1);

    // Still paused when the ejection ends: the probe stalls too, and it is out again, for longer.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let probe = tokio::spawn({
        let (addr, get) = (proxy.addr.clone(), get.clone());
        async move { timed_line(&addr, &get).await }
    });
    test_support::wait_until("the second ejection", Duration::from_secs(3), || {
        stats.outlier_ejections.get() == 2
    })
    .await;
    let (line, _) = timed_line(&proxy.addr, &get).await;
    assert!(line.contains("its probe failed"), "{line:?}");

    // What was in flight at each ejection was failed then, not left to wait for the timeout.
    for w in waiting {
        let line = w.await.unwrap();
        assert!(
            line.starts_with("SERVER_ERROR circuit open for ")
                && line.contains("ejected while the request waited"),
            "{line:?}"
        );
    }
    let (line, took) = probe.await.unwrap();
    assert!(line.contains("after its probe failed"), "{line:?}");
    assert!(
        took < Duration::from_millis(500),
        "failed at the ejection: {took:?} {line:?}"
    );

    // Resumed: within the (doubled) ejection a probe closes the breaker.
    servers[1].resume();
    let resumed = Instant::now();
    loop {
        let (line, _) = timed_line(&proxy.addr, &get).await;
        if line == format!("VALUE {victim} 0 1\r\n") {
            break;
        }
        assert!(line.contains("circuit open"), "{line:?}");
        assert!(
            resumed.elapsed() < Duration::from_millis(1500),
            "back within the 800 ms ejection"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(!stats.outlier_ejected.load(Ordering::Relaxed));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_request_on_a_paused_server_is_failed_by_the_breaker_not_by_the_timeout() {
    // One client, one request: no other request comes to stall, so the one waiting counts again
    // for each further `slow` (100 ms here; five failures eject) and the ejection fails it after
    // about half a second, not after the 5 s timeout.
    let servers = memcacheds(2);
    let mut config = pool_config(&servers);
    config.timeout = Some(Duration::from_secs(5));
    config.breakers = Some(BreakerConfig {
        slow: Some(Duration::from_millis(100)),
        ..BreakerConfig::default()
    });
    let proxy = RunningProxy::start(config).await;
    let (victim, _) = keys_on(&proxy, 0);
    let get = format!("get {victim}\r\n").into_bytes();
    let (line, _) = timed_line(&proxy.addr, &get).await;
    assert_eq!(line, "END\r\n");
    servers[0].pause();
    let (line, took) = timed_line(&proxy.addr, &get).await;
    assert!(
        line.starts_with(&format!(
            "SERVER_ERROR circuit open for {}",
            servers[0].addr
        )),
        "{line}"
    );
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(2),
        "five stalls of 100 ms, not the timeout: {took:?}"
    );
    servers[0].resume();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_cap_refuses_at_once_what_would_queue_behind_a_stalled_server() {
    let servers = memcacheds(2);
    let mut config = pool_config(&servers);
    config.timeout = Some(Duration::from_secs(5));
    config.breakers = Some(BreakerConfig {
        max_pending: 3,
        // Errors only: the stall alone ejects nothing here.
        slow: None,
        ..BreakerConfig::default()
    });
    let proxy = RunningProxy::start(config).await;
    let (victim, other) = keys_on(&proxy, 0);
    servers[0].pause();
    let get = format!("get {victim}\r\n").into_bytes();
    let waiting = stall(&proxy.addr, get.clone(), 3).await;
    let (line, took) = timed_line(&proxy.addr, &get).await;
    assert_eq!(
        line,
        format!(
            "SERVER_ERROR {} has 3 requests pending, the most allowed (--max-pending)\r\n",
            servers[0].addr
        )
    );
    assert!(took < Duration::from_millis(50), "fast: {took:?}");
    let (line, _) = timed_line(&proxy.addr, format!("get {other}\r\n").as_bytes()).await;
    assert_eq!(line, "END\r\n");
    let stats = proxy.proxy.views()[0].servers[0].clone();
    assert_eq!(stats.pending_overflows.get(), 1);
    assert!(!stats.outlier_ejected.load(Ordering::Relaxed));
    servers[0].resume();
    for w in waiting {
        assert_eq!(w.await.unwrap(), "END\r\n");
    }
    let (line, _) = timed_line(&proxy.addr, &get).await;
    assert_eq!(line, "END\r\n", "room again");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_server_is_ejected_and_a_multi_key_read_over_it_fails_whole() {
    let Some(servers) = (0..3)
        .map(|_| RedisServer::start(&[]))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let mut config = redis_pool(&servers, "  timeout: 3000\n");
    config.breakers = Some(quick());
    let proxy = RunningProxy::start(config).await;
    let (victim, other) = keys_on(&proxy, 1);
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["SET", &victim, "v"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["SET", &other, "w"]).await, "+OK\r\n");
    let stats = proxy.proxy.views()[0].servers[1].clone();

    servers[1].pause();
    let get = |k: &str| format!("*2\r\n$3\r\nGET\r\n${}\r\n{k}\r\n", k.len()).into_bytes();
    let waiting = stall(&proxy.addr, get(&victim), 3).await;
    test_support::wait_until("the ejection", Duration::from_secs(3), || {
        stats.outlier_ejected.load(Ordering::Relaxed)
    })
    .await;
    let (line, took) = timed_line(&proxy.addr, &get(&victim)).await;
    assert!(line.starts_with("-ERR circuit open for "), "{line:?}");
    assert!(took < Duration::from_millis(50), "fast: {took:?}");
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["GET", &other]).await, "$1\r\nw\r\n");
    // No error element inside an array: the whole MGET is the error.
    let mget = cmds(&mut c, &["MGET", &other, &victim]).await;
    assert!(mget.starts_with("-ERR circuit open for "), "{mget:?}");

    for w in waiting {
        let line = w.await.unwrap();
        assert!(line.starts_with("-ERR circuit open for "), "{line:?}");
    }
    servers[1].resume();
    // The probe is the first request after the ejection: keep asking until one goes through.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let reply = cmds(&mut c, &["GET", &victim]).await;
        if reply == "$1\r\nv\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "{reply:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(!stats.outlier_ejected.load(Ordering::Relaxed));
    proxy.stop().await;
}
