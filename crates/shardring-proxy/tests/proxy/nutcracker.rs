//! Drop-in: the same config file, the same memcached servers; keys written through a live nutcracker are
//! read back through shardring's proxy, and the other way round.

use crate::common::{Client, RunningProxy};
use shardring_proxy::ProxyConfig;
use test_support::{free_port, memcacheds, Memcached, Nutcracker};

fn yaml(listen: &str, servers: &[Memcached], extra: &str) -> String {
    let mut y = format!("alpha:\n  listen: {listen}\n{extra}  servers:\n");
    for (i, s) in servers.iter().enumerate() {
        // Mixed: some servers named, some not, unequal weights.
        if i % 2 == 0 {
            y.push_str(&format!("   - {}:{}\n", s.addr, i + 1));
        } else {
            y.push_str(&format!("   - {}:{} cache-{i}\n", s.addr, i + 1));
        }
    }
    y
}

async fn drop_in(extra: &str) {
    drop_in_over(memcacheds(4), extra).await;
}

async fn drop_in_over(servers: Vec<Memcached>, extra: &str) {
    let nc_listen = format!("127.0.0.1:{}", free_port());
    let Some(nc) = Nutcracker::start(&yaml(&nc_listen, &servers, extra), &nc_listen) else {
        return;
    };
    let ours = ProxyConfig::from_yaml(&yaml(
        &format!("127.0.0.1:{}", free_port()),
        &servers,
        extra,
    ))
    .unwrap();
    let proxy = RunningProxy::start(ours.pools.into_iter().next().unwrap()).await;
    let mut via_nc = Client::connect(&nc.addr).await;
    let mut via_us = proxy.client().await;
    for i in 0..300 {
        let k = format!("nc:{{{i}}}:{}", i * 7919);
        via_nc
            .check(format!("set {k} 0 0 1\r\nn\r\n").as_bytes(), b"STORED\r\n")
            .await;
        let k = format!("us:{{{i}}}:{}", i * 7919);
        via_us
            .check(format!("set {k} 0 0 1\r\nu\r\n").as_bytes(), b"STORED\r\n")
            .await;
    }
    for i in 0..300 {
        let k = format!("nc:{{{i}}}:{}", i * 7919);
        via_us
            .check(
                format!("get {k}\r\n").as_bytes(),
                format!("VALUE {k} 0 1\r\nn\r\nEND\r\n").as_bytes(),
            )
            .await;
        let k = format!("us:{{{i}}}:{}", i * 7919);
        via_nc
            .check(
                format!("get {k}\r\n").as_bytes(),
                format!("VALUE {k} 0 1\r\nu\r\nEND\r\n").as_bytes(),
            )
            .await;
    }
    // The keys really were spread (a trivial one-server placement would pass too).
    let used = proxy.proxy.views()[0]
        .servers
        .iter()
        .filter(|s| s.requests.get() > 0)
        .count();
    assert!(used >= 3, "{used}");
    proxy.stop().await;
    drop(nc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_through_nutcracker_are_read_through_shardring_and_back_default_hash() {
    drop_in("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_in_with_md5_and_a_hash_tag() {
    drop_in("  hash: md5\n  hash_tag: \"{}\"\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_in_with_murmur_modula() {
    drop_in("  hash: murmur\n  distribution: modula\n").await;
}

/// Unix-socket servers, named and not (nutcracker hashes an unnamed one as its path and one byte more),
/// beside TCP ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_in_with_unix_socket_servers() {
    let servers = vec![
        Memcached::start_unix(),
        Memcached::start_unix(),
        Memcached::start(),
        Memcached::start_unix(),
    ];
    drop_in_over(servers, "").await;
}

/// A server that closes the connection on `stats settings` (nutcracker does, on any command it does not
/// know): the proxy's connections to it go on without asking, and are served as before.
#[tokio::test]
async fn a_server_that_closes_on_stats_settings_is_served_without_the_question() {
    let servers = memcacheds(1);
    let nc_listen = format!("127.0.0.1:{}", free_port());
    let Some(nc) = Nutcracker::start(&yaml(&nc_listen, &servers, ""), &nc_listen) else {
        return;
    };
    let config = shardring_proxy::config::PoolConfig::new(
        "front",
        "127.0.0.1:0",
        &[&format!("{}:1", nc.addr)],
    )
    .expect("valid pool");
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    c.check(b"set k 0 0 2\r\nhi\r\n", b"STORED\r\n").await;
    c.check(b"get k\r\n", b"VALUE k 0 2\r\nhi\r\nEND\r\n").await;
    // A second client, on a connection that no longer asks.
    let mut d = proxy.client().await;
    d.check(b"get k\r\n", b"VALUE k 0 2\r\nhi\r\nEND\r\n").await;
    let views = proxy.proxy.views();
    assert_eq!(
        views[0].servers[0].server_err.get(),
        0,
        "no failure counted"
    );
    proxy.stop().await;
}

/// A membership's identity is its placement: a live nutcracker over a file listing the servers in
/// the reverse order places every key as one over the file's order (it sorts a pool's servers before
/// placing keys), ketama and modula alike; so the proxy's membership digest, which proxies report and
/// `shardring migrate` compares, is the same for both files, and its placement matches nutcracker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_order_in_the_file_changes_no_placement_nor_the_membership_digest() {
    let servers = memcacheds(4);
    for extra in ["", "  hash: md5\n  distribution: modula\n"] {
        let listens = [0, 1].map(|_| format!("127.0.0.1:{}", free_port()));
        let forward = yaml(&listens[0], &servers, extra);
        // The same lines, server lines reversed.
        let (head, lines) = forward.split_at(forward.find("   - ").unwrap());
        let mut reversed: Vec<&str> = lines.lines().collect();
        reversed.reverse();
        let backward = format!("{head}{}\n", reversed.join("\n")).replace(&listens[0], &listens[1]);
        assert_ne!(
            forward.replace(&listens[0], ""),
            backward.replace(&listens[1], "")
        );
        let Some(a) = Nutcracker::start(&forward, &listens[0]) else {
            return;
        };
        let Some(b) = Nutcracker::start(&backward, &listens[1]) else {
            return;
        };
        let ours = |text: &str| ProxyConfig::from_yaml(text).unwrap().pools.remove(0);
        let own = format!("127.0.0.1:{}", free_port());
        let (ours_a, ours_b) = (
            ours(&forward.replace(&listens[0], &own)),
            ours(&backward.replace(&listens[1], &own)),
        );
        assert_eq!(
            ours_a.placement_spec().digest(),
            ours_b.placement_spec().digest(),
            "{extra}"
        );
        let proxy = RunningProxy::start(ours_b).await;
        let (mut via_a, mut via_b, mut via_us) = (
            Client::connect(&a.addr).await,
            Client::connect(&b.addr).await,
            proxy.client().await,
        );
        for i in 0..300 {
            let k = format!("order:{i}:{}", i * 7919);
            via_a
                .check(format!("set {k} 0 0 1\r\na\r\n").as_bytes(), b"STORED\r\n")
                .await;
        }
        for i in 0..300 {
            let k = format!("order:{i}:{}", i * 7919);
            let hit = format!("VALUE {k} 0 1\r\na\r\nEND\r\n");
            via_b
                .check(format!("get {k}\r\n").as_bytes(), hit.as_bytes())
                .await;
            via_us
                .check(format!("get {k}\r\n").as_bytes(), hit.as_bytes())
                .await;
            via_a
                .check(format!("delete {k}\r\n").as_bytes(), b"DELETED\r\n")
                .await;
        }
        proxy.stop().await;
    }
}
