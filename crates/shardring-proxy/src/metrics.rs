//! Counters, and their two renderings: twemproxy's stats JSON (same field names, so existing scrapers keep
//! working) and Prometheus text for `/metrics`.
//!
//! Counters are relaxed atomics: each is an independent tally read for reporting, no other memory is
//! published through them, so no ordering stronger than `Relaxed` is needed.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Latency bucket bounds in microseconds (Prometheus `le` in seconds).
const BUCKETS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per-bucket counts (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; 15],
    /// The sum of observations in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(BUCKETS_US.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }
}

/// A counter: a relaxed atomic with short methods.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    /// Subtracts one (gauges).
    pub fn dec(&self) {
        self.0.fetch_sub(1, Relaxed);
    }
    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
    /// Sets the value (gauges).
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }
}

/// One server's tallies. Kept across reloads while the server stays in its pool.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// The server's name in stats: its configured name, else `host:port`.
    pub name: String,
    /// Connections the server closed.
    pub server_eof: Counter,
    /// Connections that failed (connect errors, resets, unframeable replies).
    pub server_err: Counter,
    /// Requests that timed out.
    pub server_timedout: Counter,
    /// Open connections (gauge).
    pub server_connections: Counter,
    /// Unix time of the last ejection, 0 if never.
    pub server_ejected_at: Counter,
    /// Times the server was ejected.
    pub ejections: Counter,
    /// Whether it is ejected now.
    pub ejected: AtomicBool,
    /// Requests sent.
    pub requests: Counter,
    /// Bytes sent.
    pub request_bytes: Counter,
    /// Replies received.
    pub responses: Counter,
    /// Bytes received.
    pub response_bytes: Counter,
    /// Requests queued and not yet answered (gauge).
    pub in_queue: Counter,
    /// Request round-trip latency.
    pub latency: Histogram,
}

impl ServerStats {
    /// Fresh tallies for the server `name`.
    pub fn new(name: &str) -> ServerStats {
        ServerStats {
            name: name.to_owned(),
            ..ServerStats::default()
        }
    }
}

/// One pool's client-side tallies. Kept across reloads.
#[derive(Debug, Default)]
pub struct PoolStats {
    /// The pool's name.
    pub name: String,
    /// Clients that closed their connection.
    pub client_eof: Counter,
    /// Client connections ended by an error.
    pub client_err: Counter,
    /// Open client connections (gauge).
    pub client_connections: Counter,
    /// Client connections ever accepted.
    pub total_connections: Counter,
    /// Servers ejected.
    pub server_ejects: Counter,
    /// Requests answered with `SERVER_ERROR` because a server failed.
    pub forward_error: Counter,
    /// Server requests made by splitting multi-gets.
    pub fragments: Counter,
    /// Client requests parsed.
    pub requests: Counter,
    /// Client requests refused by the parser.
    pub client_errors: Counter,
}

impl PoolStats {
    /// Fresh tallies for the pool `name`.
    pub fn new(name: &str) -> PoolStats {
        PoolStats {
            name: name.to_owned(),
            ..PoolStats::default()
        }
    }
}

/// One pool's tallies with its current servers', for rendering.
#[derive(Debug, Clone)]
pub struct PoolView {
    /// The pool.
    pub pool: Arc<PoolStats>,
    /// Its servers, in config order.
    pub servers: Vec<Arc<ServerStats>>,
}

/// twemproxy's stats JSON: `service, source, version, uptime, timestamp, total_connections,
/// curr_connections`, then one object per pool with its counters and one object per server.
pub fn render_twemproxy_json(started: Instant, pools: &[PoolView]) -> String {
    use serde_json::{json, Map, Value};
    let mut top = Map::new();
    top.insert("service".into(), json!("nutcracker"));
    top.insert("source".into(), json!(hostname()));
    top.insert(
        "version".into(),
        json!(concat!("shardring-", env!("CARGO_PKG_VERSION"))),
    );
    top.insert("uptime".into(), json!(started.elapsed().as_secs()));
    top.insert("timestamp".into(), json!(unix_now()));
    let total: u64 = pools.iter().map(|p| p.pool.total_connections.get()).sum();
    let curr: u64 = pools.iter().map(|p| p.pool.client_connections.get()).sum();
    top.insert("total_connections".into(), json!(total));
    top.insert("curr_connections".into(), json!(curr));
    for view in pools {
        let p = &view.pool;
        let mut pool = Map::new();
        pool.insert("client_eof".into(), json!(p.client_eof.get()));
        pool.insert("client_err".into(), json!(p.client_err.get()));
        pool.insert(
            "client_connections".into(),
            json!(p.client_connections.get()),
        );
        pool.insert("server_ejects".into(), json!(p.server_ejects.get()));
        pool.insert("forward_error".into(), json!(p.forward_error.get()));
        pool.insert("fragments".into(), json!(p.fragments.get()));
        for s in &view.servers {
            let server: Value = json!({
                "server_eof": s.server_eof.get(),
                "server_err": s.server_err.get(),
                "server_timedout": s.server_timedout.get(),
                "server_connections": s.server_connections.get(),
                "server_ejected_at": s.server_ejected_at.get(),
                "requests": s.requests.get(),
                "request_bytes": s.request_bytes.get(),
                "responses": s.responses.get(),
                "response_bytes": s.response_bytes.get(),
                "in_queue": s.in_queue.get(),
                "in_queue_bytes": 0,
                "out_queue": 0,
                "out_queue_bytes": 0,
            });
            pool.insert(s.name.clone(), server);
        }
        top.insert(p.name.clone(), Value::Object(pool));
    }
    Value::Object(top).to_string()
}

/// Prometheus text exposition (version 0.0.4).
pub fn render_prometheus(started: Instant, pools: &[PoolView]) -> String {
    let mut out = String::with_capacity(4096);
    let _ = writeln!(
        out,
        "# HELP shardring_proxy_uptime_seconds Seconds since the proxy started.\n\
         # TYPE shardring_proxy_uptime_seconds gauge\nshardring_proxy_uptime_seconds {}",
        started.elapsed().as_secs()
    );
    type PoolField = fn(&PoolStats) -> u64;
    let pool_metrics: [(&str, &str, &str, PoolField); 8] = [
        (
            "client_connections",
            "gauge",
            "Open client connections.",
            |p| p.client_connections.get(),
        ),
        (
            "client_connections_total",
            "counter",
            "Client connections accepted.",
            |p| p.total_connections.get(),
        ),
        (
            "client_eof_total",
            "counter",
            "Client connections closed by the client.",
            |p| p.client_eof.get(),
        ),
        (
            "client_err_total",
            "counter",
            "Client connections ended by an error.",
            |p| p.client_err.get(),
        ),
        (
            "requests_total",
            "counter",
            "Client requests parsed.",
            |p| p.requests.get(),
        ),
        (
            "client_errors_total",
            "counter",
            "Client requests refused as malformed or unknown.",
            |p| p.client_errors.get(),
        ),
        (
            "forward_errors_total",
            "counter",
            "Requests answered with SERVER_ERROR because a server failed.",
            |p| p.forward_error.get(),
        ),
        ("server_ejects_total", "counter", "Server ejections.", |p| {
            p.server_ejects.get()
        }),
    ];
    for (name, kind, help, get) in pool_metrics {
        let _ = writeln!(out, "# HELP shardring_proxy_pool_{name} {help}");
        let _ = writeln!(out, "# TYPE shardring_proxy_pool_{name} {kind}");
        for v in pools {
            let _ = writeln!(
                out,
                "shardring_proxy_pool_{name}{{pool=\"{}\"}} {}",
                escape(&v.pool.name),
                get(&v.pool)
            );
        }
    }
    type ServerField = fn(&ServerStats) -> u64;
    let server_metrics: [(&str, &str, &str, ServerField); 10] = [
        (
            "requests_total",
            "counter",
            "Requests sent to the server.",
            |s| s.requests.get(),
        ),
        (
            "responses_total",
            "counter",
            "Replies received from the server.",
            |s| s.responses.get(),
        ),
        (
            "request_bytes_total",
            "counter",
            "Bytes sent to the server.",
            |s| s.request_bytes.get(),
        ),
        (
            "response_bytes_total",
            "counter",
            "Bytes received from the server.",
            |s| s.response_bytes.get(),
        ),
        (
            "errors_total",
            "counter",
            "Server connection failures.",
            |s| s.server_err.get(),
        ),
        (
            "eof_total",
            "counter",
            "Server connections closed by the server.",
            |s| s.server_eof.get(),
        ),
        (
            "timeouts_total",
            "counter",
            "Requests that timed out.",
            |s| s.server_timedout.get(),
        ),
        (
            "ejections_total",
            "counter",
            "Times the server was ejected.",
            |s| s.ejections.get(),
        ),
        ("connections", "gauge", "Open server connections.", |s| {
            s.server_connections.get()
        }),
        ("ejected", "gauge", "1 while the server is ejected.", |s| {
            u64::from(s.ejected.load(Relaxed))
        }),
    ];
    for (name, kind, help, get) in server_metrics {
        let _ = writeln!(out, "# HELP shardring_proxy_server_{name} {help}");
        let _ = writeln!(out, "# TYPE shardring_proxy_server_{name} {kind}");
        for v in pools {
            for s in &v.servers {
                let _ = writeln!(
                    out,
                    "shardring_proxy_server_{name}{{pool=\"{}\",server=\"{}\"}} {}",
                    escape(&v.pool.name),
                    escape(&s.name),
                    get(s)
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP shardring_proxy_server_latency_seconds Request round-trip time to the server.\n\
         # TYPE shardring_proxy_server_latency_seconds histogram"
    );
    for v in pools {
        for s in &v.servers {
            let labels = format!(
                "pool=\"{}\",server=\"{}\"",
                escape(&v.pool.name),
                escape(&s.name)
            );
            let mut cumulative = 0;
            for (i, bound) in BUCKETS_US.iter().enumerate() {
                cumulative += s.latency.buckets[i].load(Relaxed);
                let _ = writeln!(
                    out,
                    "shardring_proxy_server_latency_seconds_bucket{{{labels},le=\"{}\"}} {cumulative}",
                    *bound as f64 / 1e6
                );
            }
            cumulative += s.latency.buckets[BUCKETS_US.len()].load(Relaxed);
            let _ = writeln!(
                out,
                "shardring_proxy_server_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "shardring_proxy_server_latency_seconds_sum{{{labels}}} {}",
                s.latency.sum_us.load(Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "shardring_proxy_server_latency_seconds_count{{{labels}}} {cumulative}"
            );
        }
    }
    out
}

/// Serves twemproxy's stats: every connection gets the JSON, then is closed (as nutcracker does).
pub async fn serve_json<F>(
    listener: tokio::net::TcpListener,
    started: Instant,
    views: F,
    stop: CancellationToken,
) where
    F: Fn() -> Vec<PoolView>,
{
    while let Some(mut s) = accept_next(&listener, &stop, "stats").await {
        let body = render_twemproxy_json(started, &views());
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(5), s.write_all(body.as_bytes())).await;
            let _ = s.shutdown().await;
        });
    }
}

/// The next connection on a stats listener, or `None` once `stop` is cancelled. Accept errors (out of
/// file descriptors and the like) are logged and retried after a pause instead of spinning.
async fn accept_next(
    listener: &tokio::net::TcpListener,
    stop: &CancellationToken,
    what: &str,
) -> Option<tokio::net::TcpStream> {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return None,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((s, _)) => return Some(s),
            Err(e) => {
                tracing::warn!(error = %e, listener = what, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves Prometheus text at `GET /metrics` (HTTP/1.0-style: one request per connection); anything else
/// gets 404.
pub async fn serve_prometheus<F>(
    listener: tokio::net::TcpListener,
    started: Instant,
    views: F,
    stop: CancellationToken,
) where
    F: Fn() -> Vec<PoolView>,
{
    while let Some(mut s) = accept_next(&listener, &stop, "metrics").await {
        let body = render_prometheus(started, &views());
        tokio::spawn(async move {
            let exchange = async {
                // Read the request head (bounded), then answer.
                let mut head = Vec::with_capacity(1024);
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                    let n = s.read(&mut buf).await?;
                    if n == 0 {
                        break;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let ok = head.starts_with(b"GET /metrics ") || head.starts_with(b"GET /metrics?");
                let (status, ctype, body) = if ok {
                    ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
                } else {
                    (
                        "404 Not Found",
                        "text/plain",
                        "not found; try /metrics\n".to_owned(),
                    )
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(reply.as_bytes()).await?;
                s.shutdown().await
            };
            let _ = tokio::time::timeout(Duration::from_secs(5), exchange).await;
        });
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Unix time now, in seconds (for `server_ejected_at`).
pub fn unix_time() -> u64 {
    unix_now()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> Vec<PoolView> {
        let pool = Arc::new(PoolStats::new("alpha"));
        pool.total_connections.add(3);
        let s = Arc::new(ServerStats::new("cache-a"));
        s.requests.add(7);
        s.latency.observe(Duration::from_micros(80));
        s.latency.observe(Duration::from_secs(5));
        vec![PoolView {
            pool,
            servers: vec![s],
        }]
    }

    #[test]
    fn json_has_twemproxys_field_names() {
        let v: serde_json::Value =
            serde_json::from_str(&render_twemproxy_json(Instant::now(), &view())).unwrap();
        assert_eq!(v["service"], "nutcracker");
        assert_eq!(v["total_connections"], 3);
        assert_eq!(v["alpha"]["cache-a"]["requests"], 7);
        for f in [
            "client_eof",
            "client_err",
            "client_connections",
            "server_ejects",
            "forward_error",
            "fragments",
        ] {
            assert!(v["alpha"][f].is_u64(), "{f}");
        }
    }

    #[test]
    fn prometheus_histogram_is_cumulative() {
        let text = render_prometheus(Instant::now(), &view());
        assert!(text.contains(
            "shardring_proxy_server_latency_seconds_bucket{pool=\"alpha\",server=\"cache-a\",le=\"0.0001\"} 1"
        ));
        assert!(text.contains(
            "shardring_proxy_server_latency_seconds_bucket{pool=\"alpha\",server=\"cache-a\",le=\"+Inf\"} 2"
        ));
        assert!(text.contains(
            "shardring_proxy_server_requests_total{pool=\"alpha\",server=\"cache-a\"} 7"
        ));
    }
}
