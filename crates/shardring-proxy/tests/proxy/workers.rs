//! The proxy on 2 and 3 worker threads (`shardring proxy --threads N`), against real memcached and
//! redis-server: clients spread over the workers, each served on its worker with that worker's own
//! server connections, while what is per pool or per server (placement, reload, ejection, tallies,
//! the drain) holds for every worker.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{pool_config, Client, RunningProxy};
use shardring_proxy::metrics::{render_prometheus, render_twemproxy_json};
use shardring_proxy::{PoolConfig, ProxyConfig};
use test_support::redis::{bulk, resp, RedisServer};
use test_support::{free_port, memcacheds, wait_until, Memcached};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// `n` clients of `proxy`, connected one after another, and waited for until the proxy has accepted
/// them all; asserts they are spread evenly over its workers (at most one apart, each worker some).
async fn clients_on_every_worker(proxy: &RunningProxy, n: usize) -> Vec<Client> {
    let before: u64 = proxy.proxy.clients_per_worker()[0].iter().sum();
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(proxy.client().await);
    }
    wait_until("every client accepted", Duration::from_secs(5), || {
        proxy.proxy.clients_per_worker()[0].iter().sum::<u64>() == before + n as u64
    })
    .await;
    let spread = &proxy.proxy.clients_per_worker()[0];
    assert_eq!(spread.len(), proxy.proxy.workers());
    let (min, max) = (spread.iter().min().unwrap(), spread.iter().max().unwrap());
    assert!(*min > 0 && max - min <= 1, "clients per worker: {spread:?}");
    clients
}

/// Runs `checks` on every client at once, each in its own task (with the client's index), and returns
/// the clients once every check has passed.
async fn all_at_once<F, Fut>(clients: Vec<Client>, checks: F) -> Vec<Client>
where
    F: Fn(usize, Client) -> Fut,
    Fut: std::future::Future<Output = Client> + Send + 'static,
{
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| tokio::spawn(checks(c, client)))
        .collect();
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.expect("a client's checks pass"));
    }
    clients
}

/// A pool over `servers` with md5 (it spreads sequential keys over the servers).
fn md5_pool(servers: &[Memcached]) -> PoolConfig {
    let mut c = pool_config(servers);
    c.hash = shardring_proxy::config::TwemproxyHash::Md5;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_spread_over_workers_get_their_own_answers_and_the_tallies_add_up() {
    for workers in [2, 3] {
        let servers = memcacheds(4);
        let mut config = md5_pool(&servers);
        config.preconnect = true;
        config.server_connections = 2;
        let proxy = RunningProxy::start_workers(config, workers).await;
        assert_eq!(proxy.proxy.workers(), workers);
        let clients = clients_on_every_worker(&proxy, 4 * workers).await;
        // Each client, at once with the others: 40 set-then-get pairs pipelined in one write (a
        // client's requests to one server take one connection, so each get sees its own set), then a
        // 12-key get over every server.
        let clients = all_at_once(clients, |c, mut client| async move {
            let mut batch = String::new();
            let mut expect = String::new();
            for i in 0..40 {
                let (k, v) = (format!("w{c}-{}", i % 10), format!("v{c}-{i}"));
                batch += &format!("set {k} 0 0 {}\r\n{v}\r\nget {k}\r\n", v.len());
                expect += &format!("STORED\r\nVALUE {k} 0 {}\r\n{v}\r\nEND\r\n", v.len());
            }
            client.check(batch.as_bytes(), expect.as_bytes()).await;
            let keys: Vec<String> = (0..10).map(|i| format!("w{c}-{i}")).collect();
            let mut reply = String::new();
            for (i, k) in keys.iter().enumerate() {
                let v = format!("v{c}-{}", 30 + i);
                reply += &format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len());
            }
            reply += "END\r\n";
            client
                .check(
                    format!("get {}\r\n", keys.join(" ")).as_bytes(),
                    reply.as_bytes(),
                )
                .await;
            client
        })
        .await;
        let views = proxy.proxy.views();
        let clients_n = 4 * workers as u64;
        // Every request counted once, whichever worker served it: 81 per client.
        assert_eq!(views[0].pool.requests.get(), clients_n * 81);
        // Every server request too: 80 single-key ones per client, and the multi-get's parts.
        let forwarded: u64 = views[0].servers.iter().map(|s| s.requests.get()).sum();
        let parts = forwarded - clients_n * 80;
        assert!(
            parts >= 2 * clients_n && parts <= 4 * clients_n,
            "{forwarded} server requests"
        );
        assert_eq!(views[0].pool.total_connections.get(), clients_n);
        // Each worker has its own server connections: workers × server_connections to each server.
        wait_until("every worker's connections", Duration::from_secs(5), || {
            views[0]
                .servers
                .iter()
                .all(|s| s.server_connections.get() == 2 * workers as u64)
        })
        .await;
        // The JSON stats and Prometheus report those totals.
        let json: serde_json::Value =
            serde_json::from_str(&render_twemproxy_json(proxy.proxy.started(), &views)).unwrap();
        let json_requests: u64 = views[0]
            .servers
            .iter()
            .map(|s| json["alpha"][&s.name]["requests"].as_u64().unwrap())
            .sum();
        assert_eq!(json_requests, forwarded);
        assert_eq!(json["total_connections"], clients_n);
        let text = render_prometheus(proxy.proxy.started(), &views);
        let line = format!(
            "shardring_proxy_pool_requests_total{{pool=\"alpha\"}} {}",
            clients_n * 81
        );
        assert!(text.contains(&line), "no {line:?} in\n{text}");
        drop(clients);
        proxy.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_servers_of_every_worker() {
    let servers = memcacheds(2);
    let proxy = RunningProxy::start_workers(md5_pool(&servers[..1]), 3).await;
    let mut clients = clients_on_every_worker(&proxy, 6).await;
    for (i, c) in clients.iter_mut().enumerate() {
        c.check(
            format!("set before{i} 0 0 1\r\nx\r\n").as_bytes(),
            b"STORED\r\n",
        )
        .await;
    }
    proxy
        .proxy
        .reload(ProxyConfig {
            pools: vec![md5_pool(&servers[1..])],
        })
        .unwrap();
    // Every client, whichever worker serves it, now reaches the second server only.
    for (i, c) in clients.iter_mut().enumerate() {
        c.check(format!("get before{i}\r\n").as_bytes(), b"END\r\n")
            .await;
        c.check(
            format!("set after{i} 0 0 1\r\ny\r\n").as_bytes(),
            b"STORED\r\n",
        )
        .await;
    }
    let mut first = Client::connect(&servers[0].addr).await;
    let mut second = Client::connect(&servers[1].addr).await;
    for i in 0..clients.len() {
        first
            .check(
                format!("get before{i} after{i}\r\n").as_bytes(),
                format!("VALUE before{i} 0 1\r\nx\r\nEND\r\n").as_bytes(),
            )
            .await;
        second
            .check(
                format!("get after{i}\r\n").as_bytes(),
                format!("VALUE after{i} 0 1\r\ny\r\nEND\r\n").as_bytes(),
            )
            .await;
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_ejected_for_every_worker() {
    let mut servers = memcacheds(3);
    let mut config = md5_pool(&servers);
    config.auto_eject_hosts = true;
    config.server_failure_limit = 2;
    config.server_retry_timeout = Duration::from_secs(30);
    config.health_check_interval = Duration::from_millis(100);
    config.timeout = Some(Duration::from_millis(500));
    let proxy = RunningProxy::start_workers(config, 2).await;
    let pool = &proxy.proxy.pools()[0];
    let victim: Vec<String> = (0..)
        .map(|i| format!("victim{i}"))
        .filter(|k| pool.server_for(k.as_bytes()) == Some(1))
        .take(5)
        .collect();
    let mut clients = clients_on_every_worker(&proxy, 4).await;
    // Every worker has used its connection to the victim.
    for c in &mut clients {
        for k in &victim {
            c.check(format!("get {k}\r\n").as_bytes(), b"END\r\n").await;
        }
    }
    let stats = proxy.proxy.views()[0].servers[1].clone();
    servers[1].kill();
    wait_until("ejection", Duration::from_secs(5), || {
        stats.ejected.load(Ordering::Relaxed)
    })
    .await;
    wait_until("the placement without it", Duration::from_secs(5), || {
        victim
            .iter()
            .all(|k| pool.server_for(k.as_bytes()) != Some(1))
    })
    .await;
    // Ejected once, for the pool: clients on every worker store and read its keys elsewhere.
    for (i, c) in clients.iter_mut().enumerate() {
        for k in &victim {
            c.check(
                format!("set {k}-{i} 0 0 1\r\nz\r\n").as_bytes(),
                b"STORED\r\n",
            )
            .await;
            c.check(
                format!("get {k}-{i}\r\n").as_bytes(),
                format!("VALUE {k}-{i} 0 1\r\nz\r\nEND\r\n").as_bytes(),
            )
            .await;
        }
    }
    assert_eq!(stats.ejections.get(), 1);
    assert_eq!(proxy.proxy.views()[0].pool.server_ejects.get(), 1);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_the_in_flight_requests_of_every_worker() {
    // A server that answers each request after 300 ms, on every connection (one per worker).
    let slow = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow_addr = slow.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        while let Ok((s, _)) = slow.accept().await {
            tokio::spawn(async move {
                let (rd, mut wr) = s.into_split();
                let mut rd = BufReader::new(rd);
                let mut line = String::new();
                while rd.read_line(&mut line).await.unwrap_or(0) > 0 {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let _ = wr.write_all(b"END\r\n").await;
                    line.clear();
                }
            });
        }
    });
    let config = PoolConfig::new("alpha", "127.0.0.1:0", &[&format!("{slow_addr}:1")]).unwrap();
    let proxy = RunningProxy::start_workers(config, 3).await;
    let mut clients = clients_on_every_worker(&proxy, 3).await;
    for c in &mut clients {
        c.send(b"get a\r\n").await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = tokio::spawn(proxy.stop());
    for c in &mut clients {
        assert_eq!(c.read_line().await, "END\r\n");
        c.expect_closed().await;
    }
    stopping.await.unwrap();
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connections_caps_clients_over_all_workers() {
    let servers = memcacheds(1);
    let mut config = pool_config(&servers);
    config.client_connections = 2;
    let proxy = RunningProxy::start_workers(config, 2).await;
    let mut clients = clients_on_every_worker(&proxy, 2).await;
    for c in &mut clients {
        c.check(b"mn\r\n", b"MN\r\n").await;
    }
    // A third client is not served while two are open, though each worker holds only one...
    let mut third = proxy.client().await;
    third.send(b"mn\r\n").await;
    let mut buf = [0u8; 4];
    let early = tokio::time::timeout(
        Duration::from_millis(300),
        tokio::io::AsyncReadExt::read(&mut third.stream, &mut buf),
    )
    .await;
    assert!(
        early.is_err(),
        "a third client was served past client_connections: 2"
    );
    // ...and is once one of them leaves, whichever worker it leaves: the freed place must reach the
    // worker that may take a client (it did not, once: the other worker held it).
    drop(clients.remove(0));
    assert_eq!(third.read_n(4).await, b"MN\r\n");
    drop(clients.remove(0));
    let mut fourth = proxy.client().await;
    fourth.check(b"mn\r\n", b"MN\r\n").await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_clients_over_workers_get_their_own_answers() {
    let Some(servers) = (0..3)
        .map(|_| RedisServer::start(&[]))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let listen = format!("127.0.0.1:{}", free_port());
    let mut yaml = format!("alpha:\n  listen: {listen}\n  redis: true\n  hash: md5\n  servers:\n");
    for s in &servers {
        yaml += &format!("   - {}:1\n", s.addr);
    }
    let config = ProxyConfig::from_yaml(&yaml).unwrap().pools.remove(0);
    for workers in [2, 3] {
        let proxy = RunningProxy::start_workers(config.clone(), workers).await;
        let clients = clients_on_every_worker(&proxy, 2 * workers).await;
        all_at_once(clients, |c, mut client| async move {
            // SET then GET of one key, pipelined: the GET sees this SET.
            let mut batch = String::new();
            let mut expect = String::new();
            for i in 0..30 {
                let (k, v) = (format!("r{workers}-{c}-{}", i % 6), format!("v{i}"));
                batch += &resp(&["SET", &k, &v]);
                batch += &resp(&["GET", &k]);
                expect += &format!("+OK\r\n{}", bulk(&v));
            }
            client.check(batch.as_bytes(), expect.as_bytes()).await;
            // MGET over the servers, merged in the client's order.
            let keys: Vec<String> = (0..6).map(|i| format!("r{workers}-{c}-{i}")).collect();
            let mut args = vec!["MGET"];
            args.extend(keys.iter().map(String::as_str));
            let mut reply = "*6\r\n".to_string();
            for i in 0..6 {
                reply += &bulk(&format!("v{}", 24 + i));
            }
            client.check(resp(&args).as_bytes(), reply.as_bytes()).await;
            client
        })
        .await;
        assert_eq!(
            proxy.proxy.views()[0].pool.requests.get(),
            2 * workers as u64 * 61
        );
        proxy.stop().await;
    }
}
