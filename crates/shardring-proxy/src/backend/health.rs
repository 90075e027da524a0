//! Server health: consecutive-failure counting with twemproxy's `auto_eject_hosts`,
//! `server_failure_limit` and `server_retry_timeout`, plus an active probe (the protocol's: `version` for
//! memcached).
//!
//! twemproxy ejects a server after `server_failure_limit` failed requests and puts it back blindly once
//! `server_retry_timeout` has passed, so a still-dead server keeps failing requests every retry period and
//! a dead server with no traffic is never noticed. Here the probe runs every `health_check_interval`
//! whether or not clients send anything: probe failures count like request failures, and an ejected server
//! rejoins only when, after `server_retry_timeout`, it answers a probe.
//!
//! Only the server's own failures count: a connect or probe that fails because the proxy is out of
//! descriptors ([`crate::descriptors`]) is the proxy's failure and never moves a server toward
//! ejection. Every ejection is logged once, with the pool, the server's name and the failure that
//! tipped it.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::breaker::Breaker;
use super::stream::{ConnectError, ServerStream};
use crate::config::BreakerConfig;
use crate::error::BackendError;
use crate::tls::connector::ServerTls;
use tokio::sync::Notify;

use crate::metrics::{unix_time, PoolStats, ServerStats};
use crate::protocol::Protocol;

/// A server's breaker ejections as its connections watch them: how many so far, and why the last.
pub(crate) type Ejections = tokio::sync::watch::Receiver<(u64, Arc<str>)>;

/// When to eject a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EjectPolicy {
    /// `auto_eject_hosts`.
    pub auto_eject: bool,
    /// `server_failure_limit`.
    pub failure_limit: u32,
    /// `server_retry_timeout`.
    pub retry_timeout: Duration,
    /// The circuit breakers (`--circuit-breakers`): fast errors while the server is out, which
    /// keep the placement as it is.
    pub breakers: Option<BreakerConfig>,
}

/// One server's failure count and ejection state.
#[derive(Debug)]
pub(crate) struct ServerHealth {
    /// Failures since the last success.
    failures: AtomicU32,
    /// The pool's policy.
    policy: EjectPolicy,
    /// When the server was (last) ejected or last failed a rejoin probe; `None` while it is in.
    ejected_since: Mutex<Option<Instant>>,
    /// Woken when the server is ejected, so the pool rebuilds its placement without waiting for a tick.
    changed: Arc<Notify>,
    /// The pool's tallies (`server_ejects`).
    pool_stats: Arc<PoolStats>,
    /// The server's circuit breaker, when the pool has them.
    breaker: Option<Breaker>,
}

impl ServerHealth {
    /// A healthy server under `policy`.
    pub(crate) fn new(
        policy: EjectPolicy,
        changed: Arc<Notify>,
        pool_stats: Arc<PoolStats>,
    ) -> ServerHealth {
        ServerHealth {
            failures: AtomicU32::new(0),
            policy,
            ejected_since: Mutex::new(None),
            changed,
            pool_stats,
            breaker: policy.breakers.map(Breaker::new),
        }
    }

    /// The policy.
    pub(crate) fn policy(&self) -> EjectPolicy {
        self.policy
    }

    /// The pool's tallies (for the pool's name in logs and its `descriptor_shortages`).
    pub(crate) fn pool_stats(&self) -> &PoolStats {
        &self.pool_stats
    }

    /// Whether the server is ejected now.
    pub(crate) fn is_ejected(&self) -> bool {
        self.ejected_since
            .lock()
            .map(|g| g.is_some())
            .unwrap_or(false)
    }

    /// Whether a request may be sent to the server (`addr`) now: always, unless its circuit
    /// breaker holds it out or it has its cap of requests pending ([`Breaker::admit`]). Admitted,
    /// the breaker's ejections so far ([`ServerHealth::ejections_now`]).
    #[inline]
    pub(crate) fn admit(&self, stats: &ServerStats, addr: &str) -> Result<u64, BackendError> {
        match &self.breaker {
            Some(b) => b.admit(stats, addr),
            None => Ok(0),
        }
    }

    /// How many times the breaker has ejected the server (0 without one): a request admitted at a
    /// lower count is failed where it waits ([`Breaker::ejections_now`]).
    pub(crate) fn ejections_now(&self) -> u64 {
        self.breaker.as_ref().map_or(0, Breaker::ejections_now)
    }

    /// A probe succeeded.
    pub(crate) fn record_success(&self, stats: &ServerStats) {
        // Relaxed: the count is this value alone; nothing else is published through it. Read first so
        // the common case (no failures) does not write a cache line shared with other threads.
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if let Some(b) = &self.breaker {
            b.success(stats, &self.pool_stats.name);
        }
    }

    /// A reply arrived `latency` after its request was written.
    #[inline]
    pub(crate) fn record_reply(&self, stats: &ServerStats, latency: Duration) {
        self.record_answer();
        if let Some(b) = &self.breaker {
            b.reply(stats, &self.pool_stats.name, latency);
        }
    }

    /// A reply arrived: the server's failures in a row are over. All a reply changes for a server
    /// without a circuit breaker, whose connections call this rather than
    /// [`ServerHealth::record_reply`] (their loop knows there is no breaker, and spares every reply
    /// the check).
    #[inline]
    pub(crate) fn record_answer(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// How long a request may wait for its reply before its wait counts against the server now
    /// (the breaker's `slow`); `None` when nothing watches.
    pub(crate) fn stall_after(&self) -> Option<Duration> {
        self.breaker.as_ref().and_then(Breaker::slow)
    }

    /// The breaker's ejections, when the server has one: its connections fail what they have in
    /// flight when it is ejected.
    pub(crate) fn ejections(&self) -> Option<Ejections> {
        self.breaker.as_ref().map(Breaker::ejections)
    }

    /// A request has waited `waited` (past [`ServerHealth::stall_after`]) for its reply: a failure
    /// for the breaker, not for `auto_eject_hosts` (which counts errors, as nutcracker does).
    pub(crate) fn record_stall(&self, stats: &ServerStats, waited: Duration) {
        if let Some(b) = &self.breaker {
            b.stalled(stats, &self.pool_stats.name, waited);
        }
    }

    /// A request, connection or probe failed because of the server (`cause`: why, without the
    /// server's address): ejects the server when the policy says so. A shortage of the proxy's own
    /// descriptors is never recorded here.
    pub(crate) fn record_failure(&self, stats: &ServerStats, cause: &dyn fmt::Display) {
        if let Some(b) = &self.breaker {
            b.failure(stats, &self.pool_stats.name, cause);
        }
        let n = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if !self.policy.auto_eject || n < self.policy.failure_limit {
            return;
        }
        let Ok(mut since) = self.ejected_since.lock() else {
            return;
        };
        if since.is_none() {
            *since = Some(Instant::now());
            stats.ejected.store(true, Ordering::Relaxed);
            stats.ejections.inc();
            stats.server_ejected_at.set(unix_time());
            self.pool_stats.server_ejects.inc();
            tracing::warn!(
                pool = %self.pool_stats.name,
                server = %stats.name,
                failures = n,
                cause = %cause,
                "server ejected"
            );
            self.changed.notify_one();
        }
    }

    /// Whether an ejected server is due a rejoin probe.
    pub(crate) fn retry_due(&self) -> bool {
        self.ejected_since
            .lock()
            .map(|g| g.is_some_and(|t| t.elapsed() >= self.policy.retry_timeout))
            .unwrap_or(false)
    }

    /// The rejoin probe's result: back in when it answered, else out for another retry period.
    pub(crate) fn rejoin_result(&self, answered: bool, stats: &ServerStats) {
        let Ok(mut since) = self.ejected_since.lock() else {
            return;
        };
        if answered {
            *since = None;
            self.failures.store(0, Ordering::Relaxed);
            stats.ejected.store(false, Ordering::Relaxed);
            tracing::info!(
                pool = %self.pool_stats.name,
                server = %stats.name,
                "server answered its probe and rejoins"
            );
            self.changed.notify_one();
        } else {
            *since = Some(Instant::now());
        }
    }
}

/// Why a health probe failed.
#[derive(Debug)]
pub(crate) enum ProbeFailure {
    /// The proxy could not open the probe's connection for want of a descriptor or socket memory:
    /// says nothing about the server ([`crate::descriptors::is_shortage`]).
    Shortage(io::Error),
    /// The connect failed (refused, unreachable, no such socket).
    Connect(io::Error),
    /// No healthy answer within the timeout.
    TimedOut,
    /// The connection failed after it opened (reset, or closed before a full answer).
    Lost(io::Error),
    /// The server closed the connection without answering.
    Closed,
    /// The server answered, but not as a healthy server does.
    Unhealthy,
    /// The TLS handshake failed, for this cause.
    Tls(String),
}

impl fmt::Display for ProbeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeFailure::Shortage(e) => write!(f, "probe failed: proxy out of descriptors: {e}"),
            ProbeFailure::Connect(e) => write!(f, "probe failed: connect: {e}"),
            ProbeFailure::TimedOut => f.write_str("probe failed: timed out"),
            ProbeFailure::Lost(e) => write!(f, "probe failed: connection lost: {e}"),
            ProbeFailure::Closed => f.write_str("probe failed: closed without answering"),
            ProbeFailure::Unhealthy => f.write_str("probe failed: unhealthy answer"),
            ProbeFailure::Tls(why) => write!(f, "probe failed: TLS handshake: {why}"),
        }
    }
}

/// Sends the protocol's probe on a fresh connection and waits for a healthy answer, all within
/// `timeout`.
pub(crate) async fn probe<P: Protocol>(
    addr: &str,
    tls: Option<&ServerTls>,
    request: &[u8],
    timeout: Duration,
) -> Result<(), ProbeFailure> {
    let attempt = async {
        let stream = ServerStream::connect(addr, tls)
            .await
            .map_err(|e| match e {
                ConnectError::Io(e) if crate::descriptors::is_shortage(&e) => {
                    ProbeFailure::Shortage(e)
                }
                ConnectError::Io(e) => ProbeFailure::Connect(e),
                ConnectError::Tls(why) => ProbeFailure::Tls(why),
            })?;
        match stream {
            ServerStream::Tcp(mut s) => ask::<P>(&mut s, request).await,
            ServerStream::Unix(mut s) => ask::<P>(&mut s, request).await,
            ServerStream::Tls(mut s) => ask::<P>(&mut s, request).await,
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or(Err(ProbeFailure::TimedOut))
}

/// Whether the server answers `request` as the protocol says a healthy server does.
async fn ask<P: Protocol>(
    s: &mut (impl AsyncRead + AsyncWrite + Unpin),
    request: &[u8],
) -> Result<(), ProbeFailure> {
    s.write_all(request).await.map_err(ProbeFailure::Lost)?;
    let mut buf = [0u8; 512];
    let mut len = 0;
    let healthy = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(ProbeFailure::Unhealthy)
        }
    };
    while len < buf.len() {
        let n = s.read(&mut buf[len..]).await.map_err(ProbeFailure::Lost)?;
        if n == 0 {
            return match P::probe_answered(&buf[..len]) {
                Some(ok) => healthy(ok),
                None if len == 0 => Err(ProbeFailure::Closed),
                None => Err(ProbeFailure::Unhealthy),
            };
        }
        len += n;
        if let Some(ok) = P::probe_answered(&buf[..len]) {
            return healthy(ok);
        }
    }
    healthy(P::probe_answered(&buf[..len]).unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::memcache::Memcache;

    /// The health check's probe reaches unix-socket servers too (a dead path is not alive).
    #[tokio::test]
    async fn the_probe_reaches_unix_socket_servers() {
        let dir = std::env::temp_dir().join(format!("shardring-probe-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("server.sock");
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 64];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"VERSION 1.6.18\r\n").await;
            }
        });
        let second = Duration::from_secs(1);
        let addr = path.to_str().unwrap();
        assert!(probe::<Memcache>(addr, None, b"version\r\n", second)
            .await
            .is_ok());
        let dead =
            probe::<Memcache>("/nonexistent/shardring.sock", None, b"version\r\n", second).await;
        assert!(matches!(&dead, Err(ProbeFailure::Connect(_))), "{dead:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
