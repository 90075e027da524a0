//! A redis pool that follows its master through real Sentinels (`redis-server --sentinel`): one master
//! and one replica as group `g1`, three Sentinels, the pool's server line naming `g1` at an address
//! where nothing listens (so every answer proves the Sentinels were asked), a write load through the
//! proxy, and the master killed: the proxy must follow the promotion. The test prints the time from
//! the kill to the first write acknowledged by the new master, and how many acknowledged writes the
//! failover lost (Redis replication is asynchronous).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shardring_proxy::config::{
    PoolConfig, ProtocolConfig, RedisConfig, SentinelConfig, ServerTlsConfig,
};
use test_support::{free_port, RedisServer, TempDir};
use tokio_util::sync::CancellationToken;

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmds, direct};
use crate::tls::{Leaf, Pki};

/// A redis-server in Sentinel mode monitoring `g1`, its rewritable config in a temp dir; killed on
/// drop.
struct Sentinel {
    addr: String,
    child: Child,
    _dir: TempDir,
}

impl Sentinel {
    /// Monitoring `g1` at `master_port`; with `tls` (a certificate and its CA), on a TLS port only,
    /// speaking TLS to the servers too, and asking clients for `requirepass s3cret`.
    fn start(master_port: u16, tls: Option<(&Leaf, &Path)>) -> Sentinel {
        let port = free_port();
        let dir = TempDir::new("follow-sentinel");
        let listen = match tls {
            Some((leaf, ca)) => format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n\
                 requirepass s3cret\n",
                leaf.cert.display(),
                leaf.key.display(),
                ca.display()
            ),
            None => format!("port {port}\n"),
        };
        let config = format!(
            "{listen}bind 127.0.0.1\ndir {}\n\
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
    failover(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_over_tls_everywhere_with_sentinels_that_ask_a_password() {
    failover(true).await;
}

/// A TLS port beside the plain one, replication over TLS: the server arguments, and that port.
fn tls_args(leaf: &Leaf, ca: &Path) -> (Vec<String>, u16) {
    let port = free_port();
    let args = [
        "--tls-port".to_owned(),
        port.to_string(),
        "--tls-cert-file".to_owned(),
        leaf.cert.display().to_string(),
        "--tls-key-file".to_owned(),
        leaf.key.display().to_string(),
        "--tls-ca-cert-file".to_owned(),
        ca.display().to_string(),
        "--tls-auth-clients".to_owned(),
        "no".to_owned(),
        "--tls-replication".to_owned(),
        "yes".to_owned(),
    ];
    (args.to_vec(), port)
}

fn start_redis(args: &[String]) -> Option<RedisServer> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    RedisServer::start(&refs)
}

/// A master and its replica as `g1`, three Sentinels, a pool whose line for `g1` points nowhere, a
/// write load, the master killed. With `tls`, the replica, the Sentinels and the proxy reach the
/// servers on their TLS ports, and the proxy the Sentinels on theirs, with a password.
async fn failover(tls: bool) {
    let data = TempDir::new("follow-data");
    let dir = data.path().display().to_string();
    let pki = Pki::new("follow");
    let leaf = pki.leaf("server", &["127.0.0.1"], false);
    let (master_tls, master_tls_port) = tls_args(&leaf, &pki.ca_pem);
    let (replica_tls, replica_tls_port) = tls_args(&leaf, &pki.ca_pem);
    let mut master_args = vec!["--dir".to_owned(), dir.clone()];
    if tls {
        master_args.extend(master_tls);
    }
    let Some(mut master) = start_redis(&master_args) else {
        return;
    };
    let master_port = if tls { master_tls_port } else { master.port };
    let mut replica_args = [
        "--dir",
        &dir,
        "--dbfilename",
        "replica.rdb",
        "--replicaof",
        "127.0.0.1",
        &master_port.to_string(),
    ]
    .map(String::from)
    .to_vec();
    if tls {
        replica_args.extend(replica_tls);
    }
    let replica = start_redis(&replica_args).expect("a replica");
    let replica_port = if tls { replica_tls_port } else { replica.port };
    let mut r = direct(&replica).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cmds(&mut r, &["INFO", "replication"])
        .await
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica never linked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start(master_port, tls.then_some((&leaf, pki.ca_pem.as_path()))))
        .collect();

    // The file's address for g1 has nothing behind it: only the Sentinels can make this pool work.
    let mut pool = PoolConfig::new("alpha", "127.0.0.1:0", &["127.0.0.1:1:1 g1"]).unwrap();
    pool.timeout = Some(Duration::from_millis(500));
    pool.protocol = ProtocolConfig::Redis(RedisConfig {
        sentinel: Some(SentinelConfig {
            addrs: sentinels.iter().map(|s| s.addr.clone()).collect(),
            password: tls.then(|| "s3cret".to_owned()),
        }),
        ..RedisConfig::default()
    });
    if tls {
        pool.server_tls = Some(ServerTlsConfig {
            ca: Some(pki.ca_pem.clone()),
            ..ServerTlsConfig::default()
        });
    }
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
        master_port,
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
        replica_port,
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
        "sentinel failover (TLS: {tls}): first write acknowledged by the new master {:.2} s after the kill \
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
