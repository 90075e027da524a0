//! twemproxy's stats JSON, and the listener that serves it the way nutcracker does: every connection gets
//! the JSON, then is closed (no HTTP; `nc host 22222` and nutcracker's own scrapers read it like that).

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::counters::{unix_time, PoolView};

/// How long a stats client gets to read the JSON before its connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Every counter of a pool's object in the stats JSON, with what it counts: what `shardring proxy -D`
/// (nutcracker's `--describe-stats`) prints. A test keeps it complete.
pub const POOL_STATS: &[(&str, &str)] = &[
    ("client_eof", "# eof on client connections"),
    ("client_err", "# errors on client connections"),
    ("client_connections", "# active client connections"),
    ("server_ejects", "# times backend server was ejected"),
    (
        "descriptor_shortages",
        "# times the proxy ran out of descriptors or socket memory",
    ),
    (
        "client_tls_handshake_errors",
        "# client connections closed because their TLS handshake failed",
    ),
    ("forward_error", "# times we encountered a forwarding error"),
    (
        "fragments",
        "# fragments created from a multi-vector request",
    ),
    (
        "membership_revision",
        "etcd revision of the servers in use (--etcd)",
    ),
    (
        "membership_updated",
        "when the servers from etcd were last swapped in, unix seconds",
    ),
    (
        "membership_errors",
        "# refused etcd snapshots, failed swaps and lost etcd connections",
    ),
    (
        "membership_malformed",
        "# malformed server values seen in etcd",
    ),
    (
        "replica_failovers",
        "# reads answered by a replica after the first failed (--replicas)",
    ),
    (
        "replica_disagreements",
        "# replica writes that did not all succeed (--replicas)",
    ),
    (
        "dual_writes",
        "# writes sent to a key's owner now and next (--next-config, etcd next/)",
    ),
    (
        "dual_write_disagreements",
        "# dual writes whose next owner answered otherwise or failed",
    ),
    (
        "fenced",
        "# requests for keys a planned change moves, refused while etcd could not confirm this proxy",
    ),
    (
        "cluster_redirections",
        "# redis cluster MOVED and ASK redirections followed inside the proxy",
    ),
    (
        "cluster_map_changes",
        "# redis cluster slot maps read that changed the pool",
    ),
    (
        "membership_current",
        "digest of the placement served now (servers, hash, distribution)",
    ),
    (
        "membership_next",
        "digest of the next placement (= membership_current without one)",
    ),
    (
        "split_digest",
        "digest of the split keys and their phases (--hot-key-split-keys; empty: none)",
    ),
    (
        "membership_current_text",
        "what membership_current is the digest of: a line per server, then the rules",
    ),
    (
        "membership_next_text",
        "what membership_next is the digest of",
    ),
    (
        "gutter_requests",
        "# requests sent to the gutter pool (--gutter)",
    ),
    (
        "warmup_open",
        "whether a warm-up window is open (--warmup-window)",
    ),
    (
        "warmup_fallbacks",
        "# misses retried on the previous owner (--warmup-window)",
    ),
    (
        "warmup_recovered",
        "# of those that hit there (--warmup-window)",
    ),
    (
        "warmup_copies",
        "# values copied to their new owner (--warmup-window)",
    ),
    (
        "warmup_copies_refused",
        "# copies not made: a newer write or delete won (--warmup-window)",
    ),
    (
        "split_reads",
        "# split keys' reads sent to a copy (--hot-key-split)",
    ),
    (
        "split_copy_misses",
        "# split keys' reads a copy missed, read from the owner",
    ),
    (
        "split_fills",
        "# split keys' copies filled from the owner",
    ),
    (
        "split_fills_refused",
        "# split-key fills not made: a write won",
    ),
    (
        "split_invalidations",
        "# split keys' copies deleted after writes",
    ),
    (
        "split_invalidations_failed",
        "# split keys' copy deletes that failed",
    ),
    (
        "hot_cache_hits",
        "# gets answered by the hot-key cache (--hot-cache-ttl)",
    ),
    ("hot_cache_fills", "# values stored in the hot-key cache"),
    (
        "hot_cache_invalidations",
        "# hot-key cache entries dropped by a write",
    ),
    (
        "key_rate_limited",
        "# requests refused: a key of theirs was over --key-rate-limit",
    ),
    (
        "pool_rate_limited",
        "# requests refused: the pool was over --pool-rate-limit",
    ),
    (
        "transactions",
        "# redis MULTI/EXEC transactions sent to a server",
    ),
    (
        "transactions_aborted",
        "# redis transactions discarded: a command in them was refused",
    ),
    (
        "blocking_requests",
        "# redis blocking commands sent on a connection of their own",
    ),
    (
        "subscriptions",
        "# redis channels and patterns subscribed to",
    ),
];

/// Every counter of a server's object in the stats JSON, with what it counts (`-D`).
pub const SERVER_STATS: &[(&str, &str)] = &[
    ("server_eof", "# eof on server connections"),
    ("server_err", "# errors on server connections"),
    ("server_timedout", "# timeouts on server connections"),
    ("server_connections", "# active server connections"),
    (
        "server_ejected_at",
        "timestamp when server was ejected in usec since epoch",
    ),
    ("requests", "# requests"),
    ("request_bytes", "total request bytes"),
    ("responses", "# responses"),
    ("response_bytes", "total response bytes"),
    ("in_queue", "# requests in incoming queue"),
    (
        "in_queue_bytes",
        "current request bytes in incoming queue (always 0 here)",
    ),
    ("out_queue", "# requests in outgoing queue (always 0 here)"),
    (
        "out_queue_bytes",
        "current request bytes in outgoing queue (always 0 here)",
    ),
    (
        "dedicated_connections",
        "# open connections of one client's own (redis WATCH, blocking commands)",
    ),
    (
        "dedicated_refused",
        "# clients refused such a connection: the server had its bound open",
    ),
    (
        "handshake_errors_tolerated",
        "# connections served after the server refused their AUTH for want of a password",
    ),
    (
        "tls_handshake_errors",
        "# connections and probes whose TLS handshake with the server failed",
    ),
    (
        "outlier_ejections",
        "# times its circuit breaker ejected it (--circuit-breakers)",
    ),
    (
        "outlier_ejected",
        "1 while its circuit breaker holds it out (ejected or half-open)",
    ),
    (
        "breaker_rejected",
        "# requests answered with a fast error while its breaker held it out",
    ),
    (
        "pending_overflows",
        "# requests answered with a fast error: it had its cap of requests pending",
    ),
];

/// twemproxy's stats JSON: `service, source, version, uptime, timestamp, total_connections,
/// curr_connections`, then one object per pool with its counters and one object per server.
///
/// The shape is nutcracker's, to the letter, because its readers depend on it: telegraf, the New Relic
/// and Diamond collectors and most hand-written scripts take every object at the top level for a pool
/// and every object inside a pool for a server, and read a server's fields without asking
/// (`server["requests"]`). So the values are numbers and strings, but for pools at the top level and
/// servers inside a pool, and each server object has all of nutcracker's server fields. Extra
/// scalars are harmless (readers skip fields they do not know); an extra object is not. What does not
/// fit that shape is served beside `/metrics` instead: the hot keys at `/hotkeys`
/// ([`super::hot_keys_json`]) and each command's latency at `/command-latency`
/// ([`super::command_latency_json`]).
pub fn render_twemproxy_json(started: Instant, pools: &[PoolView]) -> String {
    let mut top = Map::new();
    top.insert("service".into(), json!("nutcracker"));
    top.insert("source".into(), json!(hostname()));
    top.insert("version".into(), json!(crate::version::NAME_VERSION));
    top.insert("uptime".into(), json!(started.elapsed().as_secs()));
    top.insert("timestamp".into(), json!(unix_time()));
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
        // Not twemproxy's (which counts a shortage as a server's failure).
        pool.insert(
            "descriptor_shortages".into(),
            json!(p.descriptor_shortages.get()),
        );
        pool.insert(
            "client_tls_handshake_errors".into(),
            json!(p.client_tls_handshake_errors.get()),
        );
        pool.insert("forward_error".into(), json!(p.forward_error.get()));
        pool.insert("fragments".into(), json!(p.fragments.get()));
        pool.insert(
            "membership_revision".into(),
            json!(p.membership_revision.get()),
        );
        pool.insert(
            "membership_updated".into(),
            json!(p.membership_updated.get()),
        );
        pool.insert("membership_errors".into(), json!(p.membership_errors.get()));
        pool.insert(
            "membership_malformed".into(),
            json!(p.membership_malformed.get()),
        );
        // Not twemproxy's either (the remedies' counters): scalars, which twemproxy's readers skip.
        // Nothing but scalars goes here; see this function's documentation.
        pool.insert("replica_failovers".into(), json!(p.replica_failovers.get()));
        pool.insert(
            "replica_disagreements".into(),
            json!(p.replica_disagreements.get()),
        );
        pool.insert("dual_writes".into(), json!(p.dual_writes.get()));
        pool.insert(
            "dual_write_disagreements".into(),
            json!(p.dual_write_disagreements.get()),
        );
        pool.insert("fenced".into(), json!(p.fenced.get()));
        pool.insert(
            "cluster_redirections".into(),
            json!(p.cluster_redirections.get()),
        );
        pool.insert(
            "cluster_map_changes".into(),
            json!(p.cluster_map_changes.get()),
        );
        pool.insert("membership_current".into(), json!(view.placements.current));
        pool.insert("membership_next".into(), json!(view.placements.next));
        pool.insert("split_digest".into(), json!(view.placements.split));
        pool.insert(
            "membership_current_text".into(),
            json!(view.placements.current_text),
        );
        pool.insert(
            "membership_next_text".into(),
            json!(view.placements.next_text),
        );
        pool.insert("gutter_requests".into(), json!(p.gutter_requests.get()));
        pool.insert("warmup_open".into(), json!(p.warmup_open.get()));
        pool.insert("warmup_fallbacks".into(), json!(p.warmup_fallbacks.get()));
        pool.insert("warmup_recovered".into(), json!(p.warmup_recovered.get()));
        pool.insert("warmup_copies".into(), json!(p.warmup_copies.get()));
        pool.insert(
            "warmup_copies_refused".into(),
            json!(p.warmup_copies_refused.get()),
        );
        pool.insert("split_reads".into(), json!(p.split_reads.get()));
        pool.insert("split_copy_misses".into(), json!(p.split_copy_misses.get()));
        pool.insert("split_fills".into(), json!(p.split_fills.get()));
        pool.insert(
            "split_fills_refused".into(),
            json!(p.split_fills_refused.get()),
        );
        pool.insert(
            "split_invalidations".into(),
            json!(p.split_invalidations.get()),
        );
        pool.insert(
            "split_invalidations_failed".into(),
            json!(p.split_invalidations_failed.get()),
        );
        pool.insert("hot_cache_hits".into(), json!(p.hot_cache_hits.get()));
        pool.insert("hot_cache_fills".into(), json!(p.hot_cache_fills.get()));
        pool.insert(
            "hot_cache_invalidations".into(),
            json!(p.hot_cache_invalidations.get()),
        );
        pool.insert("key_rate_limited".into(), json!(p.key_rate_limited.get()));
        pool.insert("pool_rate_limited".into(), json!(p.pool_rate_limited.get()));
        pool.insert("transactions".into(), json!(p.transactions.get()));
        pool.insert(
            "transactions_aborted".into(),
            json!(p.transactions_aborted.get()),
        );
        pool.insert("blocking_requests".into(), json!(p.blocking_requests.get()));
        pool.insert("subscriptions".into(), json!(p.subscriptions.get()));
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
                "dedicated_connections": s.dedicated_connections.get(),
                "dedicated_refused": s.dedicated_refused.get(),
                "handshake_errors_tolerated": s.handshake_errors_tolerated.get(),
                "tls_handshake_errors": s.tls_handshake_errors.get(),
                "outlier_ejections": s.outlier_ejections.get(),
                "outlier_ejected": u64::from(s.outlier_ejected.load(std::sync::atomic::Ordering::Relaxed)),
                "breaker_rejected": s.breaker_rejected.get(),
                "pending_overflows": s.pending_overflows.get(),
            });
            pool.insert(s.name.clone(), server);
        }
        top.insert(p.name.clone(), Value::Object(pool));
    }
    Value::Object(top).to_string()
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
    while let Some(mut s) = crate::net::accept_with_backoff(&listener, &stop, "stats").await {
        let body = render_twemproxy_json(started, &views());
        tokio::spawn(async move {
            let _ = tokio::time::timeout(WRITE_TIMEOUT, s.write_all(body.as_bytes())).await;
            let _ = s.shutdown().await;
        });
    }
}

/// The machine's name for `source`, as nutcracker reports it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::metrics::{HotKeyRow, HotKeysReport, PoolStats, ServerStats};

    fn view() -> Vec<PoolView> {
        let pool = Arc::new(PoolStats::new("alpha"));
        pool.total_connections.add(3);
        let s = Arc::new(ServerStats::new("cache-a"));
        s.requests.add(7);
        vec![PoolView {
            pool,
            placements: Default::default(),
            servers: vec![s],
        }]
    }

    /// A memcached pool with hot keys found and a Redis pool with hot keys found and commands sent:
    /// everything the proxy measures beyond nutcracker, turned on.
    fn everything_on() -> Vec<PoolView> {
        let report = HotKeysReport {
            window_ms: 10_000,
            keys: vec![HotKeyRow {
                key: "k".into(),
                count: 5,
                server: Some("cache-a".into()),
            }],
        };
        let memcached = Arc::new(PoolStats::new("alpha"));
        memcached.hot_keys.store(Some(Arc::new(report.clone())));
        let redis = Arc::new(PoolStats::with_commands("beta", &["get", "set"]));
        redis.hot_keys.store(Some(Arc::new(report)));
        redis.commands[0].latency.observe(Duration::from_micros(40));
        vec![
            PoolView {
                pool: memcached,
                placements: Default::default(),
                servers: vec![Arc::new(ServerStats::new("cache-a"))],
            },
            PoolView {
                pool: redis,
                placements: Default::default(),
                servers: vec![Arc::new(ServerStats::new("rd0"))],
            },
        ]
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
            "descriptor_shortages",
            "forward_error",
            "fragments",
        ] {
            assert!(v["alpha"][f].is_u64(), "{f}");
        }
    }

    /// What nutcracker's readers assume: every object at the top level is a pool, every object in a
    /// pool is a server with every server field, and nothing else is an object or an array.
    #[test]
    fn every_object_in_a_pool_is_a_server_even_with_everything_on() {
        let views = everything_on();
        let v: serde_json::Value =
            serde_json::from_str(&render_twemproxy_json(Instant::now(), &views)).unwrap();
        let top = v.as_object().unwrap();
        let pools: Vec<&str> = top
            .iter()
            .filter(|(_, p)| p.is_object())
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(pools, ["alpha", "beta"], "only pools are objects: {v}");
        for (name, value) in top {
            assert!(!value.is_array(), "top-level {name}: {value}");
        }
        for (view, pool) in views.iter().zip(&pools) {
            let mut servers = Vec::new();
            for (name, value) in v[*pool].as_object().unwrap() {
                assert!(!value.is_array(), "{pool}.{name} is an array: {value}");
                if let Some(server) = value.as_object() {
                    for (field, _) in SERVER_STATS {
                        assert!(server[*field].is_u64(), "{pool}.{name}.{field}: {value}");
                    }
                    servers.push(name.as_str());
                }
            }
            let expected: Vec<&str> = view.servers.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(servers, expected, "the objects in {pool} are its servers");
        }
    }

    #[test]
    fn every_counter_in_the_json_is_described() {
        let v: serde_json::Value =
            serde_json::from_str(&render_twemproxy_json(Instant::now(), &view())).unwrap();
        let described = |table: &[(&str, &str)], name: &str| table.iter().any(|(n, _)| *n == name);
        for (name, value) in v["alpha"].as_object().unwrap() {
            if name == "cache-a" {
                continue;
            }
            assert!(described(POOL_STATS, name), "pool stat {name} ({value})");
        }
        for name in v["alpha"]["cache-a"].as_object().unwrap().keys() {
            assert!(described(SERVER_STATS, name), "server stat {name}");
        }
        assert_eq!(
            v["alpha"].as_object().unwrap().len() - 1,
            POOL_STATS.len(),
            "no described pool stat is missing from the JSON"
        );
        assert_eq!(
            v["alpha"]["cache-a"].as_object().unwrap().len(),
            SERVER_STATS.len()
        );
    }
}
