//! The metric families `/metrics` exposes: one table per level (pool, server), each row a name, a kind,
//! its help text and how to read it from the counters. Adding a counter is one row here.

use super::counters::{PoolStats, ServerStats};

/// Whether a family is a counter or a gauge (the histogram is written on its own).
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// Only goes up; `_total` on its samples.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// One pool-level family: name (without `_total`), kind, help, and how to read it.
pub(super) type PoolFamily = (&'static str, Kind, &'static str, fn(&PoolStats) -> u64);

/// The pool-level families, one sample per pool, labelled `pool`.
pub(super) const POOL_FAMILIES: [PoolFamily; 42] = [
    (
        "shardring_proxy_pool_client_connections",
        Kind::Gauge,
        "Open client connections.",
        |p| p.client_connections.get(),
    ),
    (
        "shardring_proxy_pool_client_connections_accepted",
        Kind::Counter,
        "Client connections accepted.",
        |p| p.total_connections.get(),
    ),
    (
        "shardring_proxy_pool_client_eof",
        Kind::Counter,
        "Client connections closed by the client.",
        |p| p.client_eof.get(),
    ),
    (
        "shardring_proxy_pool_client_err",
        Kind::Counter,
        "Client connections ended by an error.",
        |p| p.client_err.get(),
    ),
    (
        "shardring_proxy_pool_requests",
        Kind::Counter,
        "Client requests parsed.",
        |p| p.requests.get(),
    ),
    (
        "shardring_proxy_pool_client_errors",
        Kind::Counter,
        "Client requests refused as malformed or unknown.",
        |p| p.client_errors.get(),
    ),
    (
        "shardring_proxy_pool_forward_errors",
        Kind::Counter,
        "Requests answered with SERVER_ERROR because a server failed.",
        |p| p.forward_error.get(),
    ),
    (
        "shardring_proxy_pool_server_ejects",
        Kind::Counter,
        "Server ejections.",
        |p| p.server_ejects.get(),
    ),
    (
        "shardring_proxy_pool_descriptor_shortages",
        Kind::Counter,
        "Accepts, connects and probes that failed for want of a descriptor or socket memory (never counted against a server).",
        |p| p.descriptor_shortages.get(),
    ),
    (
        "shardring_proxy_pool_client_tls_handshake_errors",
        Kind::Counter,
        "Client connections closed because their TLS handshake failed (before any command was read).",
        |p| p.client_tls_handshake_errors.get(),
    ),
    (
        "shardring_proxy_pool_membership_revision",
        Kind::Gauge,
        "The config-store (etcd) revision of the pool's servers; 0 while on the file's servers.",
        |p| p.membership_revision.get(),
    ),
    (
        "shardring_proxy_pool_membership_updated_timestamp_seconds",
        Kind::Gauge,
        "When membership last changed the pool's servers (Unix time; 0: never).",
        |p| p.membership_updated.get(),
    ),
    (
        "shardring_proxy_pool_membership_errors",
        Kind::Counter,
        "Refused membership snapshots, failed swaps and lost config-store connections.",
        |p| p.membership_errors.get(),
    ),
    (
        "shardring_proxy_pool_membership_malformed",
        Kind::Counter,
        "Malformed server values in the config store (each skipped).",
        |p| p.membership_malformed.get(),
    ),
    (
        "shardring_proxy_pool_replica_failovers",
        Kind::Counter,
        "Replicated reads sent on to the next replica.",
        |p| p.replica_failovers.get(),
    ),
    (
        "shardring_proxy_pool_replica_disagreements",
        Kind::Counter,
        "Replicated writes whose replicas answered differently.",
        |p| p.replica_disagreements.get(),
    ),
    (
        "shardring_proxy_pool_dual_writes",
        Kind::Counter,
        "Writes sent to a key's owner now and its owner next.",
        |p| p.dual_writes.get(),
    ),
    (
        "shardring_proxy_pool_dual_write_disagreements",
        Kind::Counter,
        "Dual writes whose next owner answered otherwise or failed.",
        |p| p.dual_write_disagreements.get(),
    ),
    (
        "shardring_proxy_pool_fenced",
        Kind::Counter,
        "Requests for keys a planned change moves, refused while the proxy could not confirm its place in etcd.",
        |p| p.fenced.get(),
    ),
    (
        "shardring_proxy_pool_cluster_redirections",
        Kind::Counter,
        "Redis Cluster pools: MOVED and ASK redirections followed inside the proxy (never shown to clients).",
        |p| p.cluster_redirections.get(),
    ),
    (
        "shardring_proxy_pool_cluster_map_changes",
        Kind::Counter,
        "Redis Cluster pools: slot maps read that changed the pool (its masters, or their slots).",
        |p| p.cluster_map_changes.get(),
    ),
    (
        "shardring_proxy_pool_warmup_open",
        Kind::Gauge,
        "1 while a warm-up window is open.",
        |p| p.warmup_open.get(),
    ),
    (
        "shardring_proxy_pool_warmup_fallbacks",
        Kind::Counter,
        "Warm-up: misses on a key's new server retried on its previous server.",
        |p| p.warmup_fallbacks.get(),
    ),
    (
        "shardring_proxy_pool_warmup_recovered",
        Kind::Counter,
        "Warm-up: fallbacks that found the value.",
        |p| p.warmup_recovered.get(),
    ),
    (
        "shardring_proxy_pool_warmup_copies",
        Kind::Counter,
        "Warm-up: values copied to their new server.",
        |p| p.warmup_copies.get(),
    ),
    (
        "shardring_proxy_pool_warmup_copies_refused",
        Kind::Counter,
        "Warm-up: copies refused because newer data (a write or a delete) existed.",
        |p| p.warmup_copies_refused.get(),
    ),
    (
        "shardring_proxy_pool_split_reads",
        Kind::Counter,
        "Split keys: reads sent to a copy other than the owner.",
        |p| p.split_reads.get(),
    ),
    (
        "shardring_proxy_pool_split_copy_misses",
        Kind::Counter,
        "Split keys: reads a copy did not hold, read from the owner instead.",
        |p| p.split_copy_misses.get(),
    ),
    (
        "shardring_proxy_pool_split_fills",
        Kind::Counter,
        "Split keys: copies filled from the owner.",
        |p| p.split_fills.get(),
    ),
    (
        "shardring_proxy_pool_split_fills_refused",
        Kind::Counter,
        "Split keys: fills refused because a write deleted the copy meanwhile.",
        |p| p.split_fills_refused.get(),
    ),
    (
        "shardring_proxy_pool_split_invalidations",
        Kind::Counter,
        "Split keys: copies deleted after a write of the key (or before its first spread read).",
        |p| p.split_invalidations.get(),
    ),
    (
        "shardring_proxy_pool_split_invalidations_failed",
        Kind::Counter,
        "Split keys: copy deletes that failed (the write was answered with an error).",
        |p| p.split_invalidations_failed.get(),
    ),
    (
        "shardring_proxy_pool_gutter_requests",
        Kind::Counter,
        "Requests sent to the gutter pool because their server was ejected.",
        |p| p.gutter_requests.get(),
    ),
    (
        "shardring_proxy_pool_hot_cache_hits",
        Kind::Counter,
        "Gets answered from the hot-key cache.",
        |p| p.hot_cache_hits.get(),
    ),
    (
        "shardring_proxy_pool_hot_cache_fills",
        Kind::Counter,
        "Replies stored in the hot-key cache.",
        |p| p.hot_cache_fills.get(),
    ),
    (
        "shardring_proxy_pool_hot_cache_invalidations",
        Kind::Counter,
        "Hot-key cache entries dropped by a write through the proxy.",
        |p| p.hot_cache_invalidations.get(),
    ),
    (
        "shardring_proxy_pool_key_rate_limited",
        Kind::Counter,
        "Requests refused: a key of theirs was over its rate limit (--key-rate-limit).",
        |p| p.key_rate_limited.get(),
    ),
    (
        "shardring_proxy_pool_pool_rate_limited",
        Kind::Counter,
        "Requests refused: the pool was over its rate limit (--pool-rate-limit).",
        |p| p.pool_rate_limited.get(),
    ),
    (
        "shardring_proxy_pool_transactions",
        Kind::Counter,
        "Redis MULTI/EXEC transactions sent to a server.",
        |p| p.transactions.get(),
    ),
    (
        "shardring_proxy_pool_transactions_aborted",
        Kind::Counter,
        "Redis transactions discarded because a command in them was refused.",
        |p| p.transactions_aborted.get(),
    ),
    (
        "shardring_proxy_pool_blocking_requests",
        Kind::Counter,
        "Redis blocking commands sent on a connection of their own.",
        |p| p.blocking_requests.get(),
    ),
    (
        "shardring_proxy_pool_subscriptions",
        Kind::Counter,
        "Redis channels and patterns subscribed to.",
        |p| p.subscriptions.get(),
    ),
];

/// One server-level family: name (without unit or `_total`), whether it counts bytes, kind, help, and
/// how to read it.
pub(super) type ServerFamily = (
    &'static str,
    bool,
    Kind,
    &'static str,
    fn(&ServerStats) -> u64,
);

/// The server-level families, one sample per server, labelled `pool` and `server`.
pub(super) const SERVER_FAMILIES: [ServerFamily; 18] = [
    (
        "shardring_proxy_server_requests",
        false,
        Kind::Counter,
        "Requests sent to the server.",
        |s| s.requests.get(),
    ),
    (
        "shardring_proxy_server_responses",
        false,
        Kind::Counter,
        "Replies received from the server.",
        |s| s.responses.get(),
    ),
    (
        "shardring_proxy_server_request",
        true,
        Kind::Counter,
        "Bytes sent to the server.",
        |s| s.request_bytes.get(),
    ),
    (
        "shardring_proxy_server_response",
        true,
        Kind::Counter,
        "Bytes received from the server.",
        |s| s.response_bytes.get(),
    ),
    (
        "shardring_proxy_server_errors",
        false,
        Kind::Counter,
        "Server connection failures.",
        |s| s.server_err.get(),
    ),
    (
        "shardring_proxy_server_eof",
        false,
        Kind::Counter,
        "Server connections closed by the server.",
        |s| s.server_eof.get(),
    ),
    (
        "shardring_proxy_server_timeouts",
        false,
        Kind::Counter,
        "Requests that timed out.",
        |s| s.server_timedout.get(),
    ),
    (
        "shardring_proxy_server_ejections",
        false,
        Kind::Counter,
        "Times the server was ejected.",
        |s| s.ejections.get(),
    ),
    (
        "shardring_proxy_server_connections",
        false,
        Kind::Gauge,
        "Open server connections.",
        |s| s.server_connections.get(),
    ),
    (
        "shardring_proxy_server_ejected",
        false,
        Kind::Gauge,
        "1 while the server is ejected.",
        |s| u64::from(s.ejected.load(std::sync::atomic::Ordering::Relaxed)),
    ),
    (
        "shardring_proxy_server_dedicated_connections",
        false,
        Kind::Gauge,
        "Open connections of one client's own (Redis WATCH, blocking commands).",
        |s| s.dedicated_connections.get(),
    ),
    (
        "shardring_proxy_server_dedicated_refused",
        false,
        Kind::Counter,
        "Clients refused a connection of their own: the server had its bound open.",
        |s| s.dedicated_refused.get(),
    ),
    (
        "shardring_proxy_server_handshake_errors_tolerated",
        false,
        Kind::Counter,
        "Connections served after the server refused their AUTH for want of a password.",
        |s| s.handshake_errors_tolerated.get(),
    ),
    (
        "shardring_proxy_server_tls_handshake_errors",
        false,
        Kind::Counter,
        "Connections and probes whose TLS handshake with the server failed.",
        |s| s.tls_handshake_errors.get(),
    ),
    (
        "shardring_proxy_server_outlier_ejections",
        false,
        Kind::Counter,
        "Times the server's circuit breaker ejected it (--circuit-breakers).",
        |s| s.outlier_ejections.get(),
    ),
    (
        "shardring_proxy_server_outlier_ejected",
        false,
        Kind::Gauge,
        "1 while the server's circuit breaker holds it out (ejected or half-open).",
        |s| u64::from(s.outlier_ejected.load(std::sync::atomic::Ordering::Relaxed)),
    ),
    (
        "shardring_proxy_server_breaker_rejected",
        false,
        Kind::Counter,
        "Requests answered with a fast error while the server's breaker held it out.",
        |s| s.breaker_rejected.get(),
    ),
    (
        "shardring_proxy_server_pending_overflows",
        false,
        Kind::Counter,
        "Requests answered with a fast error: the server had its cap of requests pending.",
        |s| s.pending_overflows.get(),
    ),
];
