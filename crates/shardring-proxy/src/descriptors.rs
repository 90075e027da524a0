//! File descriptors: the limit the proxy runs under, what its configuration needs, and telling a
//! shortage of them from a failing server.
//!
//! Every client, every server connection, every listener and every health probe holds a descriptor.
//! When the process runs out (`EMFILE`), or the kernel does (`ENFILE`, or it has no socket buffers or
//! memory left: `ENOBUFS`, `ENOMEM`), an accept or a connect fails although every server is fine.
//! Counted as a server failure, such a shortage ejects healthy servers one after another until none is
//! left, and the clients already connected lose a working pool. So a shortage is the proxy's own
//! failure: it is counted (`descriptor_shortages`), logged with its cause at most once per
//! [`LOG_INTERVAL`], answered to the client as a server error
//! ([`BackendError::LocalResources`](crate::BackendError::LocalResources)), and never counted
//! against a server.
//!
//! At start the proxy raises its soft `RLIMIT_NOFILE` to the hard limit, as memcached and nginx do
//! ([`raise_limit`]), and warns when even that is below what the configuration may open ([`needed`]).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::config::PoolConfig;
use crate::metrics::PoolStats;

/// The shortest time between two log lines about descriptor shortages; the line says how many were
/// left unlogged in between. A shortage usually hits every request and every accept at once, and one
/// line per failure would flood the log (and the disk) exactly when the proxy is short of resources.
pub const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Descriptors counted on top of clients, server connections and listeners: standard input, output
/// and error, each runtime's event queue and wake-up descriptors, the log and config files, the
/// config store's connection, stats scrapes in flight.
pub const MARGIN: u64 = 32;

/// Whether `error` means the proxy (or the machine) could not get a descriptor or the memory for a
/// socket: too many open files in the process (`EMFILE`) or the system (`ENFILE`), no socket buffer
/// space (`ENOBUFS`), no memory (`ENOMEM`). Such a failure says nothing about the server or client
/// on the other end.
pub fn is_shortage(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// The process's descriptor limit (`RLIMIT_NOFILE`) at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorLimit {
    /// The soft limit the process was started with.
    pub before: u64,
    /// The soft limit now: the one in force.
    pub soft: u64,
    /// The hard limit: as far as an unprivileged process may raise the soft one.
    pub hard: u64,
}

/// Raises the soft descriptor limit to the hard one (a shell's or systemd's soft default, often 1024,
/// is far below what a proxy with thousands of clients needs, while the hard limit is usually much
/// higher).
///
/// # Errors
/// When the limit cannot be read or set.
pub fn raise_limit() -> io::Result<DescriptorLimit> {
    let (before, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    let soft = rlimit::increase_nofile_limit(hard)?;
    Ok(DescriptorLimit { before, soft, hard })
}

/// What a configuration may hold open at once, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DescriptorNeed {
    /// Clients: each pool's `client_connections` cap, summed.
    pub clients: u64,
    /// Server connections: servers × `server_connections` × workers (× two handshake lanes for
    /// Redis pools: RESP2 and RESP3 clients take separate connections), plus one health probe per
    /// server.
    pub servers: u64,
    /// Listening sockets: one per pool per worker, and the stats listeners.
    pub listeners: u64,
    /// [`MARGIN`].
    pub margin: u64,
}

impl DescriptorNeed {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.clients
            .saturating_add(self.servers)
            .saturating_add(self.listeners)
            .saturating_add(self.margin)
    }
}

/// What `pools` may hold open at once when served by `workers` workers, with `stats_listeners` stats
/// and metrics listeners beside them.
pub fn needed(pools: &[PoolConfig], workers: usize, stats_listeners: usize) -> DescriptorNeed {
    let workers = workers.max(1) as u64;
    let mut need = DescriptorNeed {
        listeners: stats_listeners as u64,
        margin: MARGIN,
        ..DescriptorNeed::default()
    };
    for p in pools {
        let gutter = p.memcache_remedies().gutter.as_ref();
        let servers = p.servers.len() + gutter.map_or(0, |g| g.servers.len());
        let servers = servers as u64;
        let lanes = if p.is_redis() { 2 } else { 1 };
        let per_server = u64::from(p.server_connections.max(1)) * lanes * workers;
        need.clients = need.clients.saturating_add(p.client_cap() as u64);
        need.servers = need
            .servers
            .saturating_add(servers.saturating_mul(per_server))
            .saturating_add(servers);
        // Each worker registers its own duplicate of the pool's listening socket.
        need.listeners = need.listeners.saturating_add(workers);
    }
    need
}

/// Where a shortage hit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum During<'a> {
    /// Accepting a client on the named listener (`clients`, `stats`, `metrics`).
    Accept(&'a str),
    /// Connecting to the named server.
    Connect(&'a str),
    /// Opening a health probe's connection to the named server.
    Probe(&'a str),
}

impl fmt::Display for During<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            During::Accept(_) => f.write_str("accept"),
            During::Connect(_) => f.write_str("connect"),
            During::Probe(_) => f.write_str("probe"),
        }
    }
}

/// Counts a shortage in `pool`'s tallies (when it hit a pool's listener or server) and logs it, at
/// most once per [`LOG_INTERVAL`] for the whole process: the descriptor table is the process's, so
/// one line speaks for every pool.
pub(crate) fn shortage(pool: Option<&PoolStats>, during: During<'_>, error: &io::Error) {
    if let Some(p) = pool {
        p.descriptor_shortages.inc();
    }
    let Some(unlogged) = LOG.allow(elapsed_ms()) else {
        return;
    };
    let pool = pool.map_or("-", |p| p.name.as_str());
    let (listener, server) = match during {
        During::Accept(l) => (l, "-"),
        During::Connect(s) | During::Probe(s) => ("-", s),
    };
    tracing::warn!(
        pool,
        server,
        listener,
        during = %during,
        error = %error,
        unlogged,
        "out of file descriptors or socket memory: the proxy's own shortage, not a server's failure \
         (raise the descriptor limit or lower client_connections)"
    );
}

/// The process-wide log pacing of [`shortage`].
static LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// Milliseconds since the first call: a monotonic clock for the throttle (a wall clock stepped back
/// would silence it).
fn elapsed_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Lets one event through per interval, counting the ones held back.
#[derive(Debug)]
struct Throttle {
    /// The interval, in milliseconds.
    interval_ms: u64,
    /// When an event was last let through, in milliseconds plus one (0: never).
    last: AtomicU64,
    /// Events held back since then.
    held: AtomicU64,
}

impl Throttle {
    const fn new(interval: Duration) -> Throttle {
        Throttle {
            interval_ms: interval.as_millis() as u64,
            last: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// At `now_ms`: `Some(events held back since the last one let through)` when this one may be
    /// logged, else `None` (and it is counted as held back).
    fn allow(&self, now_ms: u64) -> Option<u64> {
        // Relaxed: the two counts are read for a log line only; a race costs at most one line more or
        // one event counted in the next line, and the compare-exchange lets one thread through.
        let last = self.last.load(Ordering::Relaxed);
        let due = last == 0 || now_ms.saturating_add(1).saturating_sub(last) >= self.interval_ms;
        if due
            && self
                .last
                .compare_exchange(
                    last,
                    now_ms.saturating_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortage_of_descriptors_or_socket_memory_is_told_from_a_server_failure() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            let e = io::Error::from_raw_os_error(errno);
            assert!(is_shortage(&e), "{e}");
        }
        for errno in [
            libc::ECONNREFUSED,
            libc::ETIMEDOUT,
            libc::ECONNRESET,
            libc::EHOSTUNREACH,
            libc::EADDRNOTAVAIL,
            libc::ENOENT,
        ] {
            let e = io::Error::from_raw_os_error(errno);
            assert!(!is_shortage(&e), "{e}");
        }
        assert!(!is_shortage(&io::Error::other("too many open files")));
        assert!(!is_shortage(&io::ErrorKind::TimedOut.into()));
    }

    #[test]
    fn a_shortage_is_answered_as_each_protocols_server_error() {
        use crate::protocol::{memcache::Memcache, redis::Redis, Protocol};
        let e = crate::BackendError::LocalResources {
            reason: io::Error::from_raw_os_error(libc::EMFILE).to_string(),
        };
        let mut out = bytes::BytesMut::new();
        Memcache::encode_failure(&e, &mut out);
        assert_eq!(
            &out[..],
            b"SERVER_ERROR proxy out of local resources: Too many open files (os error 24)\r\n"
        );
        out.clear();
        Redis::encode_failure(&e, &mut out);
        assert_eq!(
            &out[..],
            b"-ERR proxy out of local resources: Too many open files (os error 24)\r\n"
        );
    }

    #[test]
    fn the_throttle_lets_one_event_through_per_interval_and_counts_the_rest() {
        let t = Throttle::new(Duration::from_secs(5));
        assert_eq!(t.allow(0), Some(0), "the first event is logged at once");
        assert_eq!(t.allow(1), None);
        assert_eq!(t.allow(4_999), None);
        assert_eq!(t.allow(5_000), Some(2), "two were held back");
        assert_eq!(t.allow(9_999), None);
        assert_eq!(t.allow(60_000), Some(1));
    }

    fn pool(yaml_servers: usize, client_connections: u32, server_connections: u32) -> PoolConfig {
        let servers = (0..yaml_servers)
            .map(|i| format!("   - 127.0.0.1:{}:1\n", 11211 + i))
            .collect::<String>();
        let text = format!(
            "alpha:\n  listen: 127.0.0.1:22121\n  client_connections: {client_connections}\n  \
             server_connections: {server_connections}\n  servers:\n{servers}"
        );
        let mut config = crate::ProxyConfig::from_yaml(&text).unwrap();
        config.pools.remove(0)
    }

    #[test]
    fn the_need_counts_clients_servers_per_worker_probes_listeners_and_a_margin() {
        let p = pool(3, 100, 2);
        let need = needed(std::slice::from_ref(&p), 4, 2);
        assert_eq!(need.clients, 100);
        // 3 servers × 2 connections × 4 workers, and a probe per server.
        assert_eq!(need.servers, 3 * 2 * 4 + 3);
        // The pool's socket on each of 4 workers, the stats and metrics listeners.
        assert_eq!(need.listeners, 4 + 2);
        assert_eq!(need.total(), 100 + 27 + 6 + MARGIN);
    }
}
