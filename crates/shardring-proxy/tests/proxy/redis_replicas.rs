//! Replicated redis pools (`--replicas POOL=R`) against real redis-server backends on free 127.0.0.1
//! ports: writes on every replica, reads failing over, a killed server costing no read. Skipped
//! outside CI when redis-server is missing.

use std::time::Duration;

use crate::common::RunningProxy;
use crate::redis_common::{cmds, direct, pool};
use shardring_proxy::config::PoolConfig;
use test_support::redis::{bulk, redises, RedisServer};

/// A pool over `servers` keeping each key on `replicas` of them.
fn replicated(servers: &[RedisServer], replicas: usize, extra: &str) -> PoolConfig {
    let mut config = pool(servers, extra);
    config.remedies.replicas = replicas;
    config
}

/// Keys spread over the ring (keys differing only in their last characters cluster under FNV-1a).
fn key(i: u64) -> String {
    format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// How many of `servers` hold `key`.
async fn copies(servers: &[RedisServer], key: &str) -> usize {
    let mut n = 0;
    for s in servers {
        if cmds(&mut direct(s).await, &["EXISTS", key]).await == ":1\r\n" {
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reach_every_replica_and_a_killed_server_costs_no_read() {
    let Some(mut servers) = redises(3, &[]) else {
        return;
    };
    // Without ejection, so every read of the dead server's keys fails over (with it, the dead server
    // leaves the ring at its first failure and its keys' next replicas are their owners).
    let proxy = RunningProxy::start(replicated(&servers, 2, "  timeout: 300\n")).await;
    let mut c = proxy.client().await;
    for i in 0..120 {
        assert_eq!(
            cmds(&mut c, &["SET", &key(i), &i.to_string()]).await,
            "+OK\r\n"
        );
    }
    assert_eq!(
        cmds(&mut c, &["RPUSH", "{l}list", "a", "b"]).await,
        ":2\r\n"
    );
    for i in 0..120 {
        assert_eq!(copies(&servers, &key(i)).await, 2, "key {i}");
    }
    // Split writes too: MSET and DEL on every replica, DEL counting each key once.
    let pairs: Vec<String> = (200..220).flat_map(|i| [key(i), "v".into()]).collect();
    let mut args = vec!["MSET"];
    args.extend(pairs.iter().map(String::as_str));
    assert_eq!(cmds(&mut c, &args).await, "+OK\r\n");
    for i in 200..220 {
        assert_eq!(copies(&servers, &key(i)).await, 2, "key {i}");
    }
    let dels: Vec<String> = (200..210).map(key).collect();
    let mut args = vec!["DEL"];
    args.extend(dels.iter().map(String::as_str));
    assert_eq!(cmds(&mut c, &args).await, ":10\r\n");
    for i in 200..210 {
        assert_eq!(copies(&servers, &key(i)).await, 0, "key {i}");
    }
    // One server dies: every read still answers its value, none misses, none fails.
    servers[1].kill();
    for round in 0..3 {
        for i in 0..120 {
            assert_eq!(
                cmds(&mut c, &["GET", &key(i)]).await,
                bulk(&i.to_string()),
                "key {i}, round {round}"
            );
        }
        let mut args = vec!["MGET".to_string()];
        args.extend((0..120).map(key));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = cmds(&mut c, &refs).await;
        assert!(!got.contains("-ERR") && !got.contains("$-1"), "{got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cmds(&mut c, &["LRANGE", "{l}list", "0", "-1"]).await,
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    // Writes go on to the live replicas.
    assert_eq!(cmds(&mut c, &["SET", &key(0), "after"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["GET", &key(0)]).await, bulk("after"));
    let stats = &proxy.proxy.views()[0].pool;
    assert!(
        stats.replica_failovers.get() >= 3,
        "{}",
        stats.replica_failovers.get()
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_answer_a_write_differently_are_counted_and_the_owner_answers() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(replicated(&servers, 2, "")).await;
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["SET", "n", "1"]).await, "+OK\r\n");
    // One replica's copy diverges (written behind the proxy's back).
    let mut behind = direct(&servers[0]).await;
    assert_eq!(cmds(&mut behind, &["SET", "n", "10"]).await, "+OK\r\n");
    let reply = cmds(&mut c, &["INCR", "n"]).await;
    assert!(reply == ":2\r\n" || reply == ":11\r\n", "{reply}");
    assert_eq!(proxy.proxy.views()[0].pool.replica_disagreements.get(), 1);
    // Keys that do not share a replica list (their owners differ) cannot be in one command.
    let owner = |k: &str| proxy.proxy.pools()[0].server_for(k.as_bytes());
    let other = (2..200)
        .map(key)
        .find(|k| owner(k) != owner(&key(1)))
        .expect("a key owned by the other server");
    let reply = cmds(&mut c, &["RENAME", &key(1), &other]).await;
    assert!(reply.starts_with("-CROSSSLOT"), "{reply}");
    proxy.stop().await;
}
