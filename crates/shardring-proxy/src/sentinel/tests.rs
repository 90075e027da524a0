//! The Sentinel client against real redis-server processes in Sentinel mode (a master, a replica, and
//! Sentinels monitoring them as group `g1`), and against scripted fakes through the connector for
//! what a real Sentinel never sends.

use std::io;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardring_resp::Value;
use test_support::{child_listening, free_port, wait_until, RedisServer, TempDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::conn::Conn;
use super::*;

/// A redis-server in Sentinel mode on a free port, with its config (which it rewrites) in a
/// temporary directory; killed on drop.
struct SentinelProcess {
    /// `127.0.0.1:port`.
    addr: String,
    /// The process, until killed.
    child: Option<Child>,
    /// Its directory, removed after the process is gone (fields drop in order).
    _dir: TempDir,
}

impl SentinelProcess {
    /// A Sentinel monitoring `g1` at `127.0.0.1:master_port` with a quorum of 2 and quick failure
    /// detection, plus `extra` config lines; `None` when redis-server cannot be run here (outside CI).
    fn start(master_port: u16, extra: &[&str]) -> Option<SentinelProcess> {
        for _ in 0..5 {
            let port = free_port();
            let dir = TempDir::new("sentinel");
            let mut config = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor g1 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds g1 1000\n\
                 sentinel failover-timeout g1 5000\n\
                 sentinel parallel-syncs g1 1\n",
                dir = dir.path().display()
            );
            for line in extra {
                config += line;
                config += "\n";
            }
            let path = dir.path().join("sentinel.conf");
            std::fs::write(&path, config).expect("writes the sentinel config");
            let spawned = Command::new("redis-server")
                .arg(&path)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut child = match spawned {
                Ok(child) => child,
                Err(e) => {
                    assert!(
                        std::env::var_os("CI").is_none(),
                        "redis-server must be installed in CI: {e}"
                    );
                    eprintln!("skipping: redis-server not runnable here ({e})");
                    return None;
                }
            };
            let addr = format!("127.0.0.1:{port}");
            if child_listening(&mut child, &addr) {
                return Some(SentinelProcess {
                    addr,
                    child: Some(child),
                    _dir: dir,
                });
            }
        }
        panic!("redis-sentinel did not start on any of 5 free ports");
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A master, its replica, and `n` Sentinels monitoring them as `g1`.
struct Group {
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<SentinelProcess>,
    /// The servers' directory, removed after they are gone (fields drop in order).
    _data: TempDir,
}

impl Group {
    /// `None` when redis-server is not installed (outside CI).
    async fn start(n: usize, sentinel_extra: &[&str]) -> Option<Group> {
        // A full sync writes an RDB file (the replica's copy), which belongs in a temporary directory.
        let data = TempDir::new("sentinel-data");
        let dir = data.path().to_str().expect("a UTF-8 temporary path");
        let master = RedisServer::start(&["--dir", dir])?;
        let port = master.port.to_string();
        let replica = RedisServer::start(&[
            "--dir",
            dir,
            "--dbfilename",
            "replica.rdb",
            "--replicaof",
            "127.0.0.1",
            &port,
        ])?;
        // A Sentinel learns of replicas from the master's INFO, every 10 s once it has asked the
        // first time: a replica linked before the Sentinels start is seen at once.
        wait_for("the replica's link to its master", Duration::from_secs(20), || async {
            let info = command(&replica.addr, &["INFO", "replication"]).await;
            matches!(info, Ok(Value::Bulk(b)) if String::from_utf8_lossy(&b).contains("master_link_status:up"))
        })
        .await;
        let sentinels = (0..n)
            .map(|_| SentinelProcess::start(master.port, sentinel_extra))
            .collect::<Option<Vec<_>>>()?;
        Some(Group {
            master,
            replica,
            sentinels,
            _data: data,
        })
    }

    fn addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.addr.clone()).collect()
    }

    /// Waits until every Sentinel knows the replica and the other Sentinels, so that a failover can
    /// be agreed on and has somewhere to go.
    async fn ready(&self) {
        let others = (self.sentinels.len() - 1).to_string();
        for sentinel in &self.sentinels {
            wait_for(
                "the Sentinels to find the replica and each other",
                Duration::from_secs(30),
                || async {
                    let state = command(&sentinel.addr, &["SENTINEL", "MASTER", "g1"]).await;
                    let Ok(Value::Array(fields)) = state else {
                        return false;
                    };
                    let field = |name: &str| {
                        fields
                            .chunks_exact(2)
                            .find(|p| p[0].text() == Some(name))
                            .and_then(|p| p[1].text().map(str::to_string))
                    };
                    field("num-slaves").as_deref() == Some("1")
                        && field("num-other-sentinels").as_deref() == Some(others.as_str())
                },
            )
            .await;
        }
    }
}

/// One command's reply from the server at `addr`.
async fn command(addr: &str, args: &[&str]) -> Result<Value, SentinelCause> {
    let stream = tcp_connect()(addr.to_string())
        .await
        .map_err(|e| SentinelCause::Connect(e.to_string()))?;
    let mut conn = Conn::new(stream);
    conn.send(&[args]).await?;
    tokio::time::timeout(Duration::from_secs(2), conn.read())
        .await
        .unwrap_or(Err(SentinelCause::Timeout))
}

/// Waits until `cond` holds, checking every 100 ms; panics naming `what` after `timeout`.
async fn wait_for<F: std::future::Future<Output = bool>>(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> F,
) {
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every `on_change` call of a watch, in order.
type Calls = Arc<Mutex<Vec<(String, String)>>>;

/// Starts a watch of `groups`, recording its calls; stopped when the token is cancelled.
fn watch(sentinels: &Arc<Sentinels>, groups: &[&str]) -> (Calls, CancellationToken) {
    let calls = Calls::default();
    let stop = CancellationToken::new();
    let recorded = Arc::clone(&calls);
    tokio::spawn(Arc::clone(sentinels).watch(
        groups.iter().map(|g| g.to_string()).collect(),
        move |group, master| {
            recorded
                .lock()
                .unwrap()
                .push((group.to_string(), master.to_string()));
        },
        stop.clone(),
    ));
    (calls, stop)
}

fn call(group: &str, master: &str) -> (String, String) {
    (group.to_string(), master.to_string())
}

/// A 127.0.0.1 port nothing listens on.
fn closed_port() -> String {
    format!("127.0.0.1:{}", free_port())
}

#[tokio::test]
async fn master_names_the_groups_master_passing_over_a_dead_sentinel() {
    let Some(group) = Group::start(2, &[]).await else {
        return;
    };
    let dead = closed_port();
    let sentinels = Sentinels::new(std::iter::once(dead).chain(group.addrs()));
    assert_eq!(sentinels.master("g1").await, Ok(group.master.addr.clone()));
}

#[tokio::test]
async fn an_unknown_group_is_an_error_naming_each_sentinels_answer() {
    let Some(group) = Group::start(2, &[]).await else {
        return;
    };
    let dead = closed_port();
    let sentinels = Sentinels::new(group.addrs());
    let err = sentinels.master("nope").await.unwrap_err();
    assert!(err.is_unknown_group(), "{err}");
    let text = err.to_string();
    for addr in group.addrs() {
        assert!(
            text.contains(&format!("{addr}: monitors no such master group")),
            "{text}"
        );
    }
    assert!(
        text.starts_with("master group nope: no Sentinel gave its master ("),
        "{text}"
    );

    // With a Sentinel down as well, the cause is each one's own, and retrying may help.
    let sentinels = Sentinels::new([dead.clone()].into_iter().chain(group.addrs()));
    let err = sentinels.master("nope").await.unwrap_err();
    assert!(!err.is_unknown_group(), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("{dead}: cannot connect: ")),
        "{err}"
    );
}

#[tokio::test]
async fn a_password_is_sent_first_and_a_wrong_or_missing_one_is_a_clear_error() {
    let Some(group) = Group::start(1, &["requirepass s3cret"]).await else {
        return;
    };
    let master = Sentinels::new(group.addrs())
        .password("s3cret")
        .master("g1")
        .await;
    assert_eq!(master, Ok(group.master.addr.clone()));

    let wrong = Sentinels::new(group.addrs())
        .password("guess")
        .master("g1")
        .await;
    let Err(SentinelError::Unresolved { failures, .. }) = &wrong else {
        panic!("a wrong password resolved: {wrong:?}");
    };
    assert!(
        matches!(&failures[..], [SentinelFailure { cause: SentinelCause::AuthRefused(e), .. }] if e.starts_with("WRONGPASS")),
        "{failures:?}"
    );
    assert!(wrong
        .unwrap_err()
        .to_string()
        .contains("refused the password: WRONGPASS"));

    let missing = Sentinels::new(group.addrs()).master("g1").await;
    let Err(SentinelError::Unresolved { failures, .. }) = &missing else {
        panic!("no password resolved: {missing:?}");
    };
    assert!(
        matches!(
            &failures[..],
            [SentinelFailure {
                cause: SentinelCause::AuthRequired(_),
                ..
            }]
        ),
        "{failures:?}"
    );
}

#[tokio::test]
async fn watch_reports_the_replica_once_after_the_master_is_killed() {
    let Some(mut group) = Group::start(3, &[]).await else {
        return;
    };
    group.ready().await;
    let sentinels = Arc::new(Sentinels::new(group.addrs()));
    let stats = sentinels.stats();
    let (calls, stop) = watch(&sentinels, &["g1", "not-monitored"]);
    let first = call("g1", &group.master.addr);
    wait_until("the master's first report", Duration::from_secs(10), || {
        calls.lock().unwrap().first() == Some(&first)
    })
    .await;
    wait_until("three subscriptions", Duration::from_secs(10), || {
        stats.connected() == 3
    })
    .await;

    group.master.kill();
    let promoted = call("g1", &group.replica.addr);
    wait_until("the replica's report", Duration::from_secs(30), || {
        calls.lock().unwrap().contains(&promoted)
    })
    .await;
    // Every Sentinel announces the switch and the resolver sees it too: one report.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(*calls.lock().unwrap(), [first, promoted]);
    assert_eq!(stats.switches(), 1);
    stop.cancel();
    wait_until("the subscriptions closed", Duration::from_secs(5), || {
        stats.connected() == 0
    })
    .await;
}

#[tokio::test]
async fn a_killed_sentinel_does_not_stop_the_others_reporting_a_failover() {
    let Some(mut group) = Group::start(3, &[]).await else {
        return;
    };
    group.ready().await;
    let sentinels = Arc::new(Sentinels::new(group.addrs()).retry_max(Duration::from_millis(500)));
    let stats = sentinels.stats();
    let (calls, stop) = watch(&sentinels, &["g1"]);
    wait_until("three subscriptions", Duration::from_secs(10), || {
        stats.connected() == 3
    })
    .await;

    // The first one, which the resolver asks first too.
    group.sentinels[0].kill();
    wait_until(
        "the lost subscription noticed",
        Duration::from_secs(10),
        || stats.connected() == 2,
    )
    .await;
    group.master.kill();
    let promoted = call("g1", &group.replica.addr);
    wait_until("the replica's report", Duration::from_secs(30), || {
        calls.lock().unwrap().last() == Some(&promoted)
    })
    .await;
    assert_eq!(calls.lock().unwrap()[0], call("g1", &group.master.addr));
    stop.cancel();
}

/// A connector to fakes: each address's fake does what its [`Fake`] says once it has read something,
/// then reads until the client closes. Unknown addresses refuse the connection.
fn fakes(scripts: Vec<(&'static str, Fake)>) -> Connect {
    let scripts = Arc::new(scripts);
    Arc::new(move |addr: String| -> Connecting {
        let scripts = Arc::clone(&scripts);
        Box::pin(async move {
            let Some((_, fake)) = scripts.iter().find(|(a, _)| *a == addr) else {
                return Err(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
            };
            let fake = fake.clone();
            let (ours, mut theirs) = tokio::io::duplex(1 << 16);
            tokio::spawn(async move {
                let mut sink = [0u8; 1024];
                if theirs.read(&mut sink).await.unwrap_or(0) == 0 {
                    return;
                }
                match fake {
                    Fake::Answer(bytes) => {
                        // A byte a write: the client must put replies together from pieces.
                        for b in bytes {
                            if theirs.write_all(&[b]).await.is_err() {
                                return;
                            }
                        }
                    }
                    Fake::Endless(header) => {
                        let _ = theirs.write_all(header).await;
                        let chunk = [b'a'; 1024];
                        while theirs.write_all(&chunk).await.is_ok() {}
                        return;
                    }
                    Fake::Closes(bytes) => {
                        let _ = theirs.write_all(&bytes).await;
                        return;
                    }
                    Fake::Silent => {}
                }
                while theirs.read(&mut sink).await.unwrap_or(0) > 0 {}
            });
            Ok(Box::new(ours) as SentinelStream)
        })
    })
}

/// What a fake Sentinel does.
#[derive(Clone)]
enum Fake {
    /// Writes these bytes.
    Answer(Vec<u8>),
    /// Writes this header, then `a` for ever.
    Endless(&'static [u8]),
    /// Writes these bytes and closes the connection.
    Closes(Vec<u8>),
    /// Answers nothing.
    Silent,
}

const MASTER_REPLY: &[u8] = b"*2\r\n$8\r\n10.0.0.9\r\n$4\r\n6380\r\n";

#[tokio::test]
async fn replies_arriving_a_byte_at_a_time_are_read_whole() {
    let sentinels =
        Sentinels::new(["a:1"]).connect(fakes(vec![("a:1", Fake::Answer(MASTER_REPLY.to_vec()))]));
    assert_eq!(sentinels.master("g1").await.as_deref(), Ok("10.0.0.9:6380"));
}

#[tokio::test]
async fn a_sentinel_that_does_not_know_the_group_passes_to_the_next() {
    let sentinels = Sentinels::new(["a:1", "b:1"]).connect(fakes(vec![
        ("a:1", Fake::Answer(b"*-1\r\n".to_vec())),
        ("b:1", Fake::Answer(MASTER_REPLY.to_vec())),
    ]));
    assert_eq!(sentinels.master("g1").await.as_deref(), Ok("10.0.0.9:6380"));
}

#[tokio::test]
async fn hostile_or_silent_sentinels_are_errors_and_the_next_one_answers() {
    let hostile: Vec<(&'static str, Fake)> = vec![
        ("endless-bulk:1", Fake::Endless(b"$60000\r\n")),
        ("endless-line:1", Fake::Endless(b"+")),
        ("huge-bulk:1", Fake::Endless(b"$99999999\r\n")),
        ("huge-array:1", Fake::Answer(b"*99999999\r\n".to_vec())),
        (
            "garbage:1",
            Fake::Answer(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
        ),
        ("resp3:1", Fake::Answer(b"%1\r\n+ip\r\n+x\r\n".to_vec())),
        ("one-string:1", Fake::Answer(b"*1\r\n$1\r\nx\r\n".to_vec())),
        (
            "bad-port:1",
            Fake::Answer(b"*2\r\n$1\r\nx\r\n$6\r\n123456\r\n".to_vec()),
        ),
        (
            "error:1",
            Fake::Answer(b"-ERR unknown command 'SENTINEL'\r\n".to_vec()),
        ),
        ("closes:1", Fake::Closes(b"*2\r\n$8\r\n10.0".to_vec())),
        ("silent:1", Fake::Silent),
    ];
    let names: Vec<&str> = hostile.iter().map(|(a, _)| *a).collect();
    let mut all = hostile.clone();
    all.push(("good:1", Fake::Answer(MASTER_REPLY.to_vec())));
    let started = Instant::now();
    let sentinels = Sentinels::new(names.iter().copied().chain(["good:1"]))
        .connect(fakes(all.clone()))
        .timeout(Duration::from_millis(300));
    assert_eq!(sentinels.master("g1").await.as_deref(), Ok("10.0.0.9:6380"));
    assert!(started.elapsed() < Duration::from_secs(20));

    let without_good = Sentinels::new(names.iter().copied())
        .connect(fakes(hostile))
        .timeout(Duration::from_millis(300));
    let Err(SentinelError::Unresolved { failures, .. }) = without_good.master("g1").await else {
        panic!("hostile Sentinels resolved");
    };
    let causes: Vec<String> = failures.iter().map(ToString::to_string).collect();
    assert_eq!(failures.len(), names.len(), "{causes:#?}");
    for (failure, name) in failures.iter().zip(&names) {
        assert_eq!(failure.addr, *name);
        let fits = match *name {
            "silent:1" => failure.cause == SentinelCause::Timeout,
            "error:1" => {
                matches!(&failure.cause, SentinelCause::Refused(e) if e.starts_with("ERR unknown"))
            }
            "closes:1" => matches!(failure.cause, SentinelCause::Lost(_)),
            _ => matches!(failure.cause, SentinelCause::Malformed(_)),
        };
        assert!(fits, "{failure}");
    }
}

#[tokio::test]
async fn no_sentinels_is_its_own_error() {
    let none = Sentinels::new(Vec::<String>::new());
    assert_eq!(none.master("g1").await, Err(SentinelError::NoSentinels));
}

#[test]
fn the_password_is_never_in_debug_output() {
    let s = Sentinels::new(["a:1"]).password("s3cret");
    let text = format!("{s:?}");
    assert!(
        !text.contains("s3cret") && text.contains("<redacted>"),
        "{text}"
    );
}

#[test]
fn addresses_are_host_port_with_ipv6_in_brackets() {
    assert_eq!(
        host_port("10.0.0.1", "6380").as_deref(),
        Ok("10.0.0.1:6380")
    );
    assert_eq!(host_port("::1", "6380").as_deref(), Ok("[::1]:6380"));
    assert_eq!(host_port("redis-a", "1").as_deref(), Ok("redis-a:1"));
    for (host, port) in [
        ("", "1"),
        ("a b", "1"),
        ("h", "0"),
        ("h", "65536"),
        ("h", "x"),
    ] {
        assert!(host_port(host, port).is_err(), "{host} {port}");
    }
}
