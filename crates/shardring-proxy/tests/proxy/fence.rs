//! Fencing (`src/fence.rs`): a proxy that follows etcd and cannot renew its registration while a
//! planned change is known refuses the keys the change moves, with a clear error and never a value,
//! and serves every other key; once etcd answers again it serves them all.

use std::time::{Duration, Instant};

use crate::common::{pool_config, Client, RunningProxy};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring::membership::Member;
use shardring_etcd::{admin, EtcdSource};
use shardring_proxy::membership::{self, EtcdMembership};
use test_support::{etcd_available, memcacheds, Etcd, Memcached, Relay};
use tokio_util::sync::CancellationToken;

fn member(m: &Memcached) -> Member {
    let server: TwemproxyServer = m.server_spec().parse().unwrap();
    Member::from_twemproxy(&server).unwrap()
}

async fn get(c: &mut Client, key: &str) -> String {
    c.send(format!("get {key}\r\n").as_bytes()).await;
    let line = c.read_line().await;
    if line.starts_with("VALUE") {
        let _ = c.read_n(3).await; // "v\r\n"
        let _ = c.read_line().await; // END
    }
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_cut_off_from_etcd_during_a_change_refuses_only_the_keys_that_move() {
    cut_off_during_a_change(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_blackholed_after_learning_of_a_change_refuses_only_the_keys_that_move() {
    cut_off_during_a_change(true).await;
}

/// The change published before the proxy starts and its path cut, or published once it runs and
/// its path blackholed.
async fn cut_off_during_a_change(later: bool) {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let servers = memcacheds(4);
    let source = EtcdSource::builder(&[etcd.url()], "alpha").build();
    let all: Vec<Member> = servers.iter().map(member).collect();
    admin::publish(&source, &all).await.unwrap();
    if !later {
        admin::publish_next(&source, &all[..3]).await.unwrap();
    }
    let relay = Relay::start(format!("127.0.0.1:{}", etcd.client_port)).await;
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let stop = CancellationToken::new();
    let settings = EtcdMembership::new([relay.url()])
        .debounce(Duration::from_millis(20))
        .retry_max(Duration::from_millis(300));
    membership::start(proxy.proxy.pools(), &settings, stop.clone())
        .await
        .unwrap();
    let pools = proxy.proxy.pools();
    if later {
        admin::publish_next(&source, &all[..3]).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while pools[0].config().planned_change().is_none() {
            assert!(Instant::now() < deadline, "the change never arrived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        pools[0].config().planned_change().is_some(),
        "the change is known"
    );
    // A key of the leaving server moves; the others' keys stay.
    let leaving = pools[0]
        .config()
        .servers
        .iter()
        .position(|s| s.address() == servers[3].addr)
        .unwrap();
    let keys: Vec<String> = (0..2000u64)
        .map(|i| format!("{:x}:fence", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    let moved = keys
        .iter()
        .find(|k| pools[0].server_for(k.as_bytes()) == Some(leaving))
        .unwrap()
        .clone();
    let stays: Vec<&String> = keys
        .iter()
        .filter(|k| pools[0].server_for(k.as_bytes()) != Some(leaving))
        .take(20)
        .collect();
    let mut c = proxy.client().await;
    for k in stays.iter().copied().chain([&moved]) {
        c.send(format!("set {k} 0 0 1\r\nv\r\n").as_bytes()).await;
        assert_eq!(c.read_line().await, "STORED\r\n");
    }
    let cut = Instant::now();
    if later {
        relay.blackhole();
    } else {
        relay.cut();
    }
    let fenced_after = loop {
        for k in &stays {
            assert!(
                get(&mut c, k).await.starts_with("VALUE"),
                "{k} stays served"
            );
        }
        let reply = get(&mut c, &moved).await;
        if reply.starts_with("SERVER_ERROR fenced") {
            break cut.elapsed();
        }
        assert!(
            reply.starts_with("VALUE"),
            "before the fence, served: {reply:?}"
        );
        assert!(cut.elapsed() < Duration::from_secs(20), "never fenced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Not before 60 % of the 10-s lease without a renewal (the last one up to 2.5 s before the cut).
    assert!(
        fenced_after >= Duration::from_millis(3400),
        "{fenced_after:?}"
    );
    // A write of it is refused too, and a noreply one stays silent.
    c.send(format!("set {moved} 0 0 1\r\nw\r\n").as_bytes())
        .await;
    assert!(c.read_line().await.starts_with("SERVER_ERROR fenced"));
    c.send(format!("set {moved} 0 0 1 noreply\r\nw\r\nget {}\r\n", stays[0]).as_bytes())
        .await;
    assert!(c.read_line().await.starts_with("VALUE"), "noreply: nothing");
    let _ = c.read_n(3).await;
    let _ = c.read_line().await;
    // A multi-get with a key that moves fails whole: its key read as a miss would be a stale read.
    c.send(format!("get {} {moved} {}\r\n", stays[0], stays[1]).as_bytes())
        .await;
    let reply = c.read_line().await;
    assert!(reply.starts_with("SERVER_ERROR fenced"), "{reply:?}");
    // One of keys that stay only is served as usual.
    c.send(format!("get {} {}\r\n", stays[0], stays[1]).as_bytes())
        .await;
    let mut lines = Vec::new();
    for _ in 0..5 {
        lines.push(c.read_line().await);
    }
    assert!(
        lines[0].starts_with("VALUE") && lines[2].starts_with("VALUE") && lines[4] == "END\r\n",
        "{lines:?}"
    );
    assert!(proxy.proxy.views()[0].pool.fenced.get() >= 3, "counted");
    relay.restore();
    let healed = Instant::now();
    loop {
        let reply = get(&mut c, &moved).await;
        if reply.starts_with("VALUE") {
            break;
        }
        assert!(healed.elapsed() < Duration::from_secs(20), "{reply:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "fenced {fenced_after:?} after the cut; served again {:?} after it healed",
        healed.elapsed()
    );
    stop.cancel();
    proxy.stop().await;
}
