//! A redis pool that follows its master through real Sentinels (`redis-server --sentinel`): one master
//! and one replica as group `g1`, three Sentinels, the pool's server line naming `g1` at an address
//! where nothing listens (so every answer proves the Sentinels were asked), a write load through the
//! proxy, and the master killed: the proxy must follow the promotion. The test prints the time from
//! the kill to the first write acknowledged by the new master, and how many acknowledged writes the
//! failover lost (Redis replication is asynchronous).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shardring_proxy::config::{PoolConfig, ProtocolConfig, RedisConfig, SentinelConfig};
use test_support::{free_port, RedisServer, TempDir};
use tokio_util::sync::CancellationToken;

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmds, direct};

/// A redis-server in Sentinel mode monitoring `g1`, its rewritable config in a temp dir; killed on
/// drop.
struct Sentinel {
    addr: String,
    child: Child,
    _dir: TempDir,
}

impl Sentinel {
    fn start(master_port: u16) -> Sentinel {
        let port = free_port();
        let dir = TempDir::new("follow-sentinel");
        let config = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor g1 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds g1 1000\n\
             sentinel failover-timeout g1 5000\n\
             sentinel parallel-syncs g1 1\n",
            dir.path().display()
        );
        let path = dir.path().join("sentinel.conf");
        std::fs::write(&path, config).unwrap();
        let child = Command::new("redis-server")
            .arg(&path)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs in Sentinel mode");
        let addr = format!("127.0.0.1:{port}");
        test_support::wait_listening(&addr);
        Sentinel {
            addr,
            child,
            _dir: dir,
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `SET key value` through `c` got: `+OK`, another reply (an error), or the connection closed.
#[derive(Debug, PartialEq)]
enum Answer {
    Ok,
    Error(String),
    Closed,
}

async fn set(c: &mut Client, key: &str, value: &str) -> Answer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
        key.len(),
        value.len()
    );
    if c.stream.write_all(req.as_bytes()).await.is_err() {
        return Answer::Closed;
    }
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), c.stream.read(&mut b)).await {
            Ok(Ok(1)) => line.push(b[0]),
            _ => return Answer::Closed,
        }
    }
    match line.as_slice() {
        b"+OK\r\n" => Answer::Ok,
        other => Answer::Error(String::from_utf8_lossy(other).trim_end().to_owned()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_follows_its_master_through_sentinels_when_the_master_is_killed() {
    let data = TempDir::new("follow-data");
    let dir = data.path().to_str().unwrap();
    let Some(mut master) = RedisServer::start(&["--dir", dir]) else {
        return;
    };
    let port = master.port.to_string();
    let replica = RedisServer::start(&[
        "--dir",
        dir,
        "--dbfilename",
        "replica.rdb",
        "--replicaof",
        "127.0.0.1",
        &port,
    ])
    .expect("a replica");
    let mut r = direct(&replica).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cmds(&mut r, &["INFO", "replication"])
        .await
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica never linked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port)).collect();

    // The file's address for g1 has nothing behind it: only the Sentinels can make this pool work.
    let mut pool = PoolConfig::new("alpha", "127.0.0.1:0", &["127.0.0.1:1:1 g1"]).unwrap();
    pool.timeout = Some(Duration::from_millis(500));
    pool.protocol = ProtocolConfig::Redis(RedisConfig {
        sentinel: Some(SentinelConfig {
            addrs: sentinels.iter().map(|s| s.addr.clone()).collect(),
            password: None,
        }),
        ..RedisConfig::default()
    });
    let proxy = RunningProxy::start_pools(vec![pool]).await;
    let stop = CancellationToken::new();
    let _followers =
        shardring_proxy::sentinel::follow::start(proxy.proxy.pools(), stop.clone()).await;
    let mut c = proxy.client().await;
    assert_eq!(
        set(&mut c, "follow:before", "1").await,
        Answer::Ok,
        "served at the master the Sentinels named"
    );
    assert_eq!(
        proxy.proxy.pools()[0].config().servers[0].port,
        master.port,
        "the server line now points at the master"
    );

    // A write load; the master killed in the middle of it.
    let mut acknowledged = Vec::new();
    for i in 0..200 {
        let key = format!("follow:{i}");
        if set(&mut c, &key, "x").await == Answer::Ok {
            acknowledged.push(key);
        }
    }
    master.kill();
    let killed = Instant::now();
    let mut refused: Vec<Answer> = Vec::new();
    let mut i = 200;
    let promoted_after = loop {
        assert!(
            killed.elapsed() < Duration::from_secs(40),
            "no write succeeded within 40 s of the kill"
        );
        let key = format!("follow:{i}");
        i += 1;
        let answer = set(&mut c, &key, "x").await;
        match answer {
            Answer::Ok => {
                acknowledged.push(key);
                break killed.elapsed();
            }
            // A reconnecting client, as applications' pools do after a drop.
            Answer::Closed => c = proxy.client().await,
            Answer::Error(_) => {}
        }
        refused.push(answer);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        proxy.proxy.pools()[0].config().servers[0].port,
        replica.port,
        "the server moved to the promoted replica"
    );
    // Sentinel kills the promoted server's normal clients (CLIENT KILL TYPE normal): a new one.
    let mut r = direct(&replica).await;
    assert!(cmds(&mut r, &["ROLE"]).await.contains("master"));
    let mut lost = 0;
    for key in &acknowledged {
        if cmds(&mut r, &["EXISTS", key]).await != ":1\r\n" {
            lost += 1;
        }
    }
    eprintln!(
        "sentinel failover: first write acknowledged by the new master {:.2} s after the kill \
         ({} writes refused meanwhile); {lost} of {} acknowledged writes lost",
        promoted_after.as_secs_f64(),
        refused.len(),
        acknowledged.len()
    );
    let closed = refused.iter().filter(|a| **a == Answer::Closed).count();
    eprintln!(
        "  refused: {closed} connections closed, {} error replies (first: {:?})",
        refused.len() - closed,
        refused.iter().find(|a| **a != Answer::Closed)
    );
    stop.cancel();
}
