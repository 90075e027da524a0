//! What the workspace's tests start and wait on, in one place: real servers (memcached, redis-server,
//! a Redis Cluster, etcd, nutcracker) as child processes on free 127.0.0.1 ports, killed on drop; free
//! ports; waiting on a condition; and the golden-file reader of the compatibility tests.
//!
//! A test that needs a server which is not installed is skipped with a message on a developer's machine
//! and fails in CI (the `CI` environment variable set), where `.ci/run` installs every one of them. The
//! memcached starter is the exception: memcached is needed by so many tests that it is required.
//!
//! The proxy's in-process proxy and raw client stay in the proxy's tests: this crate depends on no
//! workspace crate, so every crate can take it as a dev-dependency without a cycle.

use std::net::{TcpListener, TcpStream};
use std::process::Child;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub mod etcd;
pub mod golden;
pub mod history;
pub mod memcached;
pub mod nutcracker;
pub mod redis;
pub mod redis_cluster;
pub mod relay;
pub mod resp_conn;

pub use etcd::{etcd_available, Etcd};
pub use memcached::{memcacheds, Memcached};
pub use nutcracker::Nutcracker;
pub use redis::{redises, RedisServer};
pub use redis_cluster::{ClusterNode, RedisCluster, Role};
pub use relay::Relay;

/// A free TCP port on 127.0.0.1: bound, read and released, and never handed out twice in one test
/// binary. Another process can take it before the caller binds it; the starters here retry on another
/// port when that happens.
///
/// Why once per process: the kernel hands out a random free port, so two tests of one binary that start
/// their servers at once now and then get the same port while neither is bound yet. The second server
/// then exits, and its test talks to the first test's server (and sees it vanish when that test ends).
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port on 127.0.0.1");
        let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Waits until `cond` holds, checking every 20 ms; panics naming `what` after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Blocks until something accepts TCP connections on `addr`; panics after 10 s.
pub fn wait_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listening on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Blocks until `child` accepts TCP connections on `addr`. `false` when it exited first (its port was
/// taken, most often) or did not listen within 10 s; the child is then killed and reaped.
pub fn child_listening(child: &mut Child, addr: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        if child.try_wait().ok().flatten().is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Kills and reaps `child`, if it still runs (a server a test stopped, or one being dropped).
fn stop(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to `child`, if it still runs: a server paused as a stalled
/// one is (swapping, stopped by a debugger), then resumed.
fn signal(child: &Option<Child>, signal: &str) {
    if let Some(c) = child {
        let _ = std::process::Command::new("kill")
            .args([signal, &c.id().to_string()])
            .status();
        if signal == "-STOP" {
            wait_stopped(c.id());
        }
    }
}

/// Waits (up to 2 s) until every thread of process `pid` is stopped: `kill -STOP` returns once the
/// signal is queued, and a server thread running on another CPU can still answer a request that
/// arrives meanwhile, which a test of a paused server would then not be testing.
fn wait_stopped(pid: u32) {
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return true; // Not Linux's /proc, or gone: nothing to wait for.
        };
        tasks.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
                // The state follows the command name's closing parenthesis.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
                    .is_none_or(|state| state == 'T' || state == 't')
            })
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !stopped() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// For a program that could not be spawned: says the test is skipped on a developer's machine, and
/// panics in CI, where `.ci/run` installs every server the tests use.
fn skip_missing(program: &str, err: &std::io::Error) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{program} must be installed in CI: {err}"
    );
    eprintln!("skipping: {program} not runnable here ({err}); .ci/run installs it");
}

/// A directory under the system's temporary directory, named for this process and a free port, removed
/// on drop.
#[derive(Debug)]
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/shardring-{prefix}-{pid}-{port}`.
    pub fn new(prefix: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "shardring-{prefix}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
