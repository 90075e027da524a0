//! Dead, hung, killed and restarted servers; ejection and health-check rejoin; reload; drain on shutdown.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::{pool_config, RunningProxy};
use shardring_proxy::{PoolConfig, ProxyConfig};
use test_support::{memcacheds, wait_until, Memcached};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// Keys owned by server `index` of the running proxy's pool, and keys owned by others.
fn keys_by_owner(proxy: &RunningProxy, index: usize, n: usize) -> (Vec<String>, Vec<String>) {
    let pool = &proxy.proxy.pools()[0];
    let (mut mine, mut other) = (Vec::new(), Vec::new());
    for i in 0.. {
        let k = format!("key{i}");
        if pool.server_for(k.as_bytes()) == Some(index) {
            if mine.len() < n {
                mine.push(k);
            }
        } else if other.len() < n {
            other.push(k);
        }
        if mine.len() == n && other.len() == n {
            break;
        }
    }
    (mine, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_fails_its_keys_only_and_multi_gets_return_what_they_can() {
    let mut servers = memcacheds(2);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let (dead_keys, live_keys) = keys_by_owner(&proxy, 0, 2);
    let mut c = proxy.client().await;
    for k in dead_keys.iter().chain(&live_keys) {
        c.check(format!("set {k} 0 0 1\r\nv\r\n").as_bytes(), b"STORED\r\n")
            .await;
    }
    servers[0].kill();
    let started = Instant::now();
    c.send(format!("get {}\r\n", dead_keys[0]).as_bytes()).await;
    let line = c.read_line().await;
    assert!(line.starts_with("SERVER_ERROR "), "{line:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    c.check(
        format!("get {}\r\n", live_keys[0]).as_bytes(),
        format!("VALUE {} 0 1\r\nv\r\nEND\r\n", live_keys[0]).as_bytes(),
    )
    .await;
    // A multi-get over both servers returns the live server's keys.
    c.check(
        format!(
            "get {} {} {} {}\r\n",
            dead_keys[0], live_keys[0], dead_keys[1], live_keys[1]
        )
        .as_bytes(),
        format!(
            "VALUE {} 0 1\r\nv\r\nVALUE {} 0 1\r\nv\r\nEND\r\n",
            live_keys[0], live_keys[1]
        )
        .as_bytes(),
    )
    .await;
    // The server comes back on the same port: its keys work again (the data is gone, as after any restart).
    servers[0] = Memcached::start_on(servers[0].port);
    c.check(format!("get {}\r\n", dead_keys[0]).as_bytes(), b"END\r\n")
        .await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_multi_get_is_an_option() {
    let mut servers = memcacheds(2);
    let mut config = pool_config(&servers);
    config.memcache_mut().unwrap().multiget_all_or_nothing = true;
    let proxy = RunningProxy::start(config).await;
    let (dead_keys, live_keys) = keys_by_owner(&proxy, 0, 1);
    let mut c = proxy.client().await;
    servers[0].kill();
    c.send(format!("get {} {}\r\n", live_keys[0], dead_keys[0]).as_bytes())
        .await;
    assert!(c.read_line().await.starts_with("SERVER_ERROR "));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_times_out_and_the_others_keep_working() {
    let servers = memcacheds(1);
    // A server that accepts and never answers.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_addr = hole.local_addr().unwrap().to_string();
    let hold = std::thread::spawn(move || {
        let conns: Vec<_> = hole.incoming().take(2).collect();
        std::thread::sleep(Duration::from_secs(3));
        drop(conns);
    });
    let mut config = PoolConfig::new(
        "alpha",
        "127.0.0.1:0",
        &[&servers[0].server_spec(), &format!("{hole_addr}:1")],
    )
    .unwrap();
    config.timeout = Some(Duration::from_millis(300));
    let proxy = RunningProxy::start(config).await;
    let (hung_keys, live_keys) = keys_by_owner(&proxy, 1, 1);
    let mut c = proxy.client().await;
    let started = Instant::now();
    c.send(format!("get {}\r\nget {}\r\n", hung_keys[0], live_keys[0]).as_bytes())
        .await;
    let line = c.read_line().await;
    assert!(line.starts_with("SERVER_ERROR timeout"), "{line:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(c.read_line().await, "END\r\n");
    let views = proxy.proxy.views();
    assert!(views[0].servers[1].server_timedout.get() >= 1);
    proxy.stop().await;
    drop(hold);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_ejected_without_traffic_and_rejoins_only_when_it_answers() {
    let mut servers = memcacheds(3);
    let mut config = pool_config(&servers);
    config.auto_eject_hosts = true;
    config.server_failure_limit = 2;
    config.server_retry_timeout = Duration::from_millis(300);
    config.health_check_interval = Duration::from_millis(100);
    config.timeout = Some(Duration::from_millis(500));
    let proxy = RunningProxy::start(config).await;
    let (victim_keys, _) = keys_by_owner(&proxy, 1, 3);
    let stats = proxy.proxy.views()[0].servers[1].clone();
    servers[1].kill();
    // No client traffic at all: the probes eject it.
    wait_until("ejection", Duration::from_secs(5), || {
        stats.ejected.load(Ordering::Relaxed)
    })
    .await;
    assert_eq!(stats.ejections.get(), 1);
    // The health task rebuilds the placement right after the ejection (woken by it): wait for that
    // swap, so the requests below are not racing it on a busy machine.
    let pool = &proxy.proxy.pools()[0];
    wait_until("the placement without it", Duration::from_secs(5), || {
        victim_keys
            .iter()
            .all(|k| pool.server_for(k.as_bytes()) != Some(1))
    })
    .await;
    // Its keys now live elsewhere, and work.
    let mut c = proxy.client().await;
    for k in &victim_keys {
        c.check(format!("set {k} 0 0 1\r\nx\r\n").as_bytes(), b"STORED\r\n")
            .await;
        c.check(
            format!("get {k}\r\n").as_bytes(),
            format!("VALUE {k} 0 1\r\nx\r\nEND\r\n").as_bytes(),
        )
        .await;
    }
    // Retry periods pass while it is still dead: it stays out (twemproxy would put it back blindly).
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(stats.ejected.load(Ordering::Relaxed));
    for k in &victim_keys {
        c.check(
            format!("get {k}\r\n").as_bytes(),
            format!("VALUE {k} 0 1\r\nx\r\nEND\r\n").as_bytes(),
        )
        .await;
    }
    // Back on its port: it answers a probe and rejoins; its keys route to it again (empty there).
    servers[1] = Memcached::start_on(servers[1].port);
    wait_until("rejoin", Duration::from_secs(5), || {
        !stats.ejected.load(Ordering::Relaxed)
    })
    .await;
    wait_until(
        "the placement with it again",
        Duration::from_secs(5),
        || {
            victim_keys
                .iter()
                .all(|k| pool.server_for(k.as_bytes()) == Some(1))
        },
    )
    .await;
    for k in &victim_keys {
        c.check(format!("get {k}\r\n").as_bytes(), b"END\r\n").await;
    }
    assert_eq!(proxy.proxy.views()[0].pool.server_ejects.get(), 1);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_load_while_a_server_is_killed_and_restarted_misroutes_nothing() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let mut servers = memcacheds(3);
    let mut config = pool_config(&servers);
    config.hash = shardring_proxy::config::TwemproxyHash::Md5;
    let proxy = RunningProxy::start(config).await;
    let (victim, _) = keys_by_owner(&proxy, 2, 1);
    let mut setup = proxy.client().await;
    for i in 0..300 {
        setup
            .check(
                format!("set key{i} 0 0 {}\r\nv{i}\r\n", format!("v{i}").len()).as_bytes(),
                b"STORED\r\n",
            )
            .await;
    }
    let key_of = |c: usize, n: usize| (c * 97 + n) % 300;
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4 {
        let addr = proxy.addr.clone();
        let stop = Arc::clone(&stop);
        clients.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let (rd, mut wr) = stream.into_split();
            let mut rd = BufReader::new(rd);
            let writer = tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut batch = String::new();
                    for _ in 0..50 {
                        batch.push_str(&format!("get key{}\r\n", key_of(c, n)));
                        n += 1;
                    }
                    wr.write_all(batch.as_bytes()).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                // The marker: answered in order after every get.
                wr.write_all(b"mn\r\n").await.unwrap();
                wr
            });
            let (mut ok, mut failed, mut missing) = (0, 0, 0);
            for n in 0.. {
                let i = key_of(c, n);
                let mut line = String::new();
                tokio::time::timeout(Duration::from_secs(10), rd.read_line(&mut line))
                    .await
                    .unwrap()
                    .unwrap();
                if line == "MN\r\n" {
                    break;
                } else if line.starts_with("SERVER_ERROR") {
                    failed += 1;
                } else if line == "END\r\n" {
                    missing += 1;
                } else {
                    let v = format!("v{i}");
                    assert_eq!(
                        line,
                        format!("VALUE key{i} 0 {}\r\n", v.len()),
                        "misrouted reply"
                    );
                    let mut data = String::new();
                    rd.read_line(&mut data).await.unwrap();
                    assert_eq!(data, format!("{v}\r\n"));
                    let mut end = String::new();
                    rd.read_line(&mut end).await.unwrap();
                    assert_eq!(end, "END\r\n");
                    ok += 1;
                }
            }
            let _ = writer.await;
            (ok, failed, missing)
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    servers[2].kill();
    tokio::time::sleep(Duration::from_millis(150)).await;
    servers[2] = Memcached::start_on(servers[2].port);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = (0, 0, 0);
    for c in clients {
        let (ok, failed, missing) = c.await.unwrap();
        total = (total.0 + ok, total.1 + failed, total.2 + missing);
    }
    eprintln!(
        "found {}, SERVER_ERROR {}, missing {} (victim key e.g. {})",
        total.0, total.1, total.2, victim[0]
    );
    // Replies came while the server was dead (errors) and after it came back empty (misses), and every
    // value that came back was the requested key's.
    assert!(total.0 > 0 && total.1 > 0 && total.2 > 0, "{total:?}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_servers_and_refuses_a_bad_config() {
    let servers = memcacheds(3);
    // md5 spreads the sequential keys below; twemproxy's fnv1a_64 keeps them together on the ring, so
    // with it they would all stay or all move.
    let md5 = |servers: &[Memcached]| {
        let mut c = pool_config(servers);
        c.hash = shardring_proxy::config::TwemproxyHash::Md5;
        c
    };
    let two = md5(&servers[..2]);
    let proxy = RunningProxy::start(two.clone()).await;
    let mut c = proxy.client().await;
    for i in 0..200 {
        c.check(format!("set r{i} 0 0 1\r\nx\r\n").as_bytes(), b"STORED\r\n")
            .await;
    }
    // A bad config changes nothing.
    let mut bad = md5(&servers);
    bad.protocol = shardring_proxy::config::ProtocolConfig::Redis(Default::default());
    let err = proxy
        .proxy
        .reload(ProxyConfig { pools: vec![bad] })
        .unwrap_err();
    assert!(err.to_string().contains("redis"), "{err}");
    assert_eq!(proxy.proxy.pools()[0].server_count(), 2);
    // A good one adds the third server; the client connection stays open.
    proxy
        .proxy
        .reload(ProxyConfig {
            pools: vec![md5(&servers)],
        })
        .unwrap();
    assert_eq!(proxy.proxy.pools()[0].server_count(), 3);
    let mut found = 0;
    for i in 0..200 {
        c.send(format!("get r{i}\r\n").as_bytes()).await;
        let line = c.read_line().await;
        if line.starts_with("VALUE") {
            found += 1;
            let _ = c.read_n(b"x\r\nEND\r\n".len()).await;
        }
    }
    // Keys that moved to the new server miss; the others are still found where they were.
    assert!(found > 100 && found < 200, "{found}");
    let views = proxy.proxy.views();
    assert!(views[0].servers[2].requests.get() > 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests() {
    // A server that answers each request after 300 ms.
    let slow = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow_addr = slow.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (s, _) = slow.accept().await.unwrap();
        let (rd, mut wr) = s.into_split();
        let mut rd = BufReader::new(rd);
        let mut line = String::new();
        while rd.read_line(&mut line).await.unwrap_or(0) > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            wr.write_all(b"END\r\n").await.unwrap();
            line.clear();
        }
    });
    let config = PoolConfig::new("alpha", "127.0.0.1:0", &[&format!("{slow_addr}:1")]).unwrap();
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    c.send(b"get a\r\n").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = tokio::spawn(proxy.stop());
    assert_eq!(c.read_line().await, "END\r\n");
    c.expect_closed().await;
    stopping.await.unwrap();
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_clients_at_once() {
    let servers = memcacheds(1);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    // Clients that served requests (so each session has waited on the drain many times) and then sit
    // idle, and one that never sent anything.
    let mut clients = Vec::new();
    for i in 0..20 {
        let mut c = proxy.client().await;
        for _ in 0..i % 5 {
            c.check(b"get idle\r\n", b"END\r\n").await;
        }
        clients.push(c);
    }
    tokio::time::timeout(Duration::from_secs(5), proxy.stop())
        .await
        .expect("the drain ends without waiting for idle clients");
    for mut c in clients {
        c.expect_closed().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_pipelined_load_answers_every_request_with_its_own_key() {
    let servers = memcacheds(3);
    let proxy = RunningProxy::start(pool_config(&servers[..2])).await;
    let mut setup = proxy.client().await;
    for i in 0..200 {
        setup
            .check(
                format!("set rl{i} 0 0 {}\r\nv{i}\r\n", format!("v{i}").len()).as_bytes(),
                b"STORED\r\n",
            )
            .await;
    }
    let mut clients = Vec::new();
    for c in 0..3usize {
        let addr = proxy.addr.clone();
        clients.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let (rd, mut wr) = stream.into_split();
            let mut rd = BufReader::new(rd);
            let total = 3000;
            let writer = tokio::spawn(async move {
                for chunk in 0..total / 100 {
                    let mut batch = String::new();
                    for j in 0..100 {
                        let i = (c * 31 + chunk * 100 + j) % 200;
                        batch.push_str(&format!("get rl{i}\r\n"));
                    }
                    wr.write_all(batch.as_bytes()).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                wr
            });
            let mut answered = 0;
            for n in 0..total {
                let i = (c * 31 + n) % 200;
                let mut line = String::new();
                tokio::time::timeout(Duration::from_secs(10), rd.read_line(&mut line))
                    .await
                    .unwrap()
                    .unwrap();
                if line.starts_with("VALUE") {
                    let v = format!("v{i}");
                    assert_eq!(
                        line,
                        format!("VALUE rl{i} 0 {}\r\n", v.len()),
                        "misrouted reply"
                    );
                    let mut data = String::new();
                    rd.read_line(&mut data).await.unwrap();
                    assert_eq!(data, format!("{v}\r\n"));
                    let mut end = String::new();
                    rd.read_line(&mut end).await.unwrap();
                    assert_eq!(end, "END\r\n");
                } else {
                    assert!(
                        line == "END\r\n" || line.starts_with("SERVER_ERROR"),
                        "{line:?}"
                    );
                }
                answered += 1;
            }
            let _ = writer.await;
            answered
        }));
    }
    // Reload back and forth between two and three servers while the clients pipeline.
    for round in 0..10 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let n = if round % 2 == 0 { 3 } else { 2 };
        proxy
            .proxy
            .reload(ProxyConfig {
                pools: vec![pool_config(&servers[..n])],
            })
            .unwrap();
    }
    let mut answered = 0;
    for c in clients {
        answered += c.await.unwrap();
    }
    assert_eq!(answered, 3 * 3000);
    proxy.stop().await;
}
