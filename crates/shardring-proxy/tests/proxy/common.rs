//! The proxy's own test support: an in-process proxy and a tiny client that reads exactly the bytes it
//! expects, with a timeout. The servers behind it come from the `test-support` crate.

#![allow(
    dead_code,
    reason = "a build without the etcd feature leaves out the tests that use some of it"
)]

use std::sync::Arc;
use std::time::Duration;

use shardring_proxy::config::PoolConfig;
use shardring_proxy::{Proxy, ProxyConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use test_support::Memcached;

/// A pool over `servers` listening on a free port, with the proxy's defaults.
pub fn pool_config(servers: &[Memcached]) -> PoolConfig {
    let specs: Vec<String> = servers.iter().map(Memcached::server_spec).collect();
    let refs: Vec<&str> = specs.iter().map(String::as_str).collect();
    PoolConfig::new("alpha", "127.0.0.1:0", &refs).expect("valid pool")
}

/// An in-process proxy, stopped on [`RunningProxy::stop`] (or aborted on drop).
pub struct RunningProxy {
    /// The first pool's listen address.
    pub addr: String,
    /// Every pool's, in pool order.
    pub addrs: Vec<String>,
    pub proxy: Arc<Proxy>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl RunningProxy {
    /// On the test's runtime (one worker), or on `SHARDRING_TEST_WORKERS` worker threads when that is
    /// set (to run every test on several workers).
    pub async fn start(config: PoolConfig) -> RunningProxy {
        if let Some(n) = std::env::var("SHARDRING_TEST_WORKERS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            return RunningProxy::start_workers(config, n).await;
        }
        let proxy = Proxy::new(ProxyConfig {
            pools: vec![config],
        })
        .expect("valid config");
        RunningProxy::serve(proxy).await
    }

    /// A proxy served by `workers` worker threads of its own (`shardring proxy --threads N`).
    pub async fn start_workers(config: PoolConfig, workers: usize) -> RunningProxy {
        let proxy = Proxy::on_workers(
            ProxyConfig {
                pools: vec![config],
            },
            shardring_proxy::workers::Workers::start(workers).expect("worker threads"),
        )
        .expect("valid config");
        RunningProxy::serve(proxy).await
    }

    /// Several pools in one proxy, on the test's runtime.
    pub async fn start_pools(pools: Vec<PoolConfig>) -> RunningProxy {
        let proxy = Proxy::new(ProxyConfig { pools }).expect("valid config");
        RunningProxy::serve(proxy).await
    }

    async fn serve(proxy: Proxy) -> RunningProxy {
        let proxy = Arc::new(proxy);
        let listeners = proxy.bind().await.expect("bind");
        let addrs: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let addr = addrs[0].clone();
        let (tx, rx) = oneshot::channel::<()>();
        let p = Arc::clone(&proxy);
        let task = tokio::spawn(async move {
            p.serve(listeners, async {
                let _ = rx.await;
            })
            .await
            .expect("serve");
        });
        RunningProxy {
            addr,
            addrs,
            proxy,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stops the proxy and waits (bounded) for it to drain.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the proxy drains within 10 s")
                .expect("the proxy task did not panic");
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.addr).await
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// A raw protocol client.
pub struct Client {
    pub stream: TcpStream,
}

pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

impl Client {
    pub async fn connect(addr: &str) -> Client {
        let stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        stream.set_nodelay(true).unwrap();
        Client { stream }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Reads exactly `n` bytes.
    pub async fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        tokio::time::timeout(IO_TIMEOUT, self.stream.read_exact(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no {n}-byte reply in time"))
            .expect("read");
        buf
    }

    /// Sends `req` and asserts the reply is exactly `expect`.
    pub async fn check(&mut self, req: &[u8], expect: &[u8]) {
        self.send(req).await;
        let got = self.read_n(expect.len()).await;
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expect),
            "reply to {:?}",
            String::from_utf8_lossy(req)
        );
    }

    /// Reads one line (up to and including `\r\n`).
    pub async fn read_line(&mut self) -> String {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            let n = tokio::time::timeout(IO_TIMEOUT, self.stream.read(&mut b))
                .await
                .expect("a line in time")
                .expect("read");
            assert!(
                n == 1,
                "connection closed after {:?}",
                String::from_utf8_lossy(&line)
            );
            line.push(b[0]);
        }
        String::from_utf8_lossy(&line).into_owned()
    }

    /// Asserts the server closes the connection (EOF) in time.
    pub async fn expect_closed(&mut self) {
        let mut b = [0u8; 64];
        let n = tokio::time::timeout(IO_TIMEOUT, self.stream.read(&mut b))
            .await
            .expect("closed in time")
            .unwrap_or(0);
        assert_eq!(
            n,
            0,
            "expected EOF, got {:?}",
            String::from_utf8_lossy(&b[..n])
        );
    }
}
