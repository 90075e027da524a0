//! The tallies the request path bumps: per pool ([`PoolStats`]) and per server ([`ServerStats`]).
//!
//! Counters are relaxed atomics: each is an independent tally read for reporting, no other memory is
//! published through them, so no ordering stronger than `Relaxed` is needed. Nothing here knows about an
//! output format; the renderers read these at scrape time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Latency bucket bounds in microseconds (Prometheus `le` in seconds).
pub(crate) const BUCKETS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per-bucket counts (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
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

    /// The per-bucket counts (not cumulative; the last is `+Inf`) and the sum in microseconds, read once
    /// each. A scrape racing an observation may see the bucket without the sum or the other way round;
    /// the count is the buckets' total, so it always matches them.
    pub(crate) fn read(&self) -> ([u64; BUCKETS_US.len() + 1], u64) {
        let buckets = std::array::from_fn(|i| self.buckets[i].load(Relaxed));
        (buckets, self.sum_us.load(Relaxed))
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
    /// Adds 1 unless that would reach `limit`; whether it did (a gauge that bounds what it counts).
    pub fn inc_below(&self, limit: u64) -> bool {
        self.0
            .fetch_update(Relaxed, Relaxed, |n| (n < limit).then_some(n + 1))
            .is_ok()
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
    /// Connection handshakes whose refused step the server still serves after (a Redis server
    /// without a password answering the pool's `AUTH`).
    pub handshake_errors_tolerated: Counter,
    /// The first of those was logged (once per server).
    pub handshake_warned: AtomicBool,
    /// Open connections of a client's own (a Redis `WATCH`, a blocking command) (gauge).
    pub dedicated_connections: Counter,
    /// Clients refused one because the server had its bound of them open.
    pub dedicated_refused: Counter,
    /// Connections and probes whose TLS handshake with the server failed (`--server-tls`).
    pub tls_handshake_errors: Counter,
    /// Times its circuit breaker ejected it (`--circuit-breakers`).
    pub outlier_ejections: Counter,
    /// Whether its circuit breaker holds it out now (ejected or half-open).
    pub outlier_ejected: AtomicBool,
    /// Requests answered with a fast error while its breaker held it out.
    pub breaker_rejected: Counter,
    /// Requests answered with a fast error because it had its cap of requests pending.
    pub pending_overflows: Counter,
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
    /// Client accepts, server connects and health probes that failed for want of a descriptor or
    /// socket memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`): the proxy's failures, never counted
    /// against a server ([`crate::descriptors`]).
    pub descriptor_shortages: Counter,
    /// Client connections whose TLS handshake failed on the pool's TLS listener (no or a bad
    /// client certificate, plaintext, a timeout): closed before any command was read.
    pub client_tls_handshake_errors: Counter,
    /// Requests answered with `SERVER_ERROR` because a server failed.
    pub forward_error: Counter,
    /// Server requests made by splitting multi-gets.
    pub fragments: Counter,
    /// Client requests parsed.
    pub requests: Counter,
    /// Client requests refused by the parser.
    pub client_errors: Counter,
    /// Membership from a config store (etcd): the revision of the servers in use (gauge; 0 while the
    /// pool runs on its file's servers).
    pub membership_revision: Counter,
    /// When membership last swapped the pool's servers, in Unix seconds (gauge; 0: never).
    pub membership_updated: Counter,
    /// Refused membership snapshots, failed swaps and lost config-store connections.
    pub membership_errors: Counter,
    /// Malformed server values in the config store (each skipped).
    pub membership_malformed: Counter,
    /// Replicated reads sent on to the next replica (after an error, or a miss with
    /// `--replica-read-miss`).
    pub replica_failovers: Counter,
    /// Replicated writes whose replicas did not all answer the same (a write that reached 1 of 2).
    pub replica_disagreements: Counter,
    /// Writes sent to a key's owner now and its owner next (the pool has a next membership).
    pub dual_writes: Counter,
    /// Dual writes whose next owner answered with another status than the owner now, or failed.
    pub dual_write_disagreements: Counter,
    /// Requests for keys a planned change moves, refused while the proxy could not confirm its
    /// registration in etcd (`crate::fence`).
    pub fenced: Counter,
    /// Redis Cluster pools: `MOVED` and `ASK` redirections followed inside the proxy.
    pub cluster_redirections: Counter,
    /// Redis Cluster pools: slot maps read that changed the pool (its masters, or their slots).
    pub cluster_map_changes: Counter,
    /// 1 while a warm-up window is open (gauge).
    pub warmup_open: Counter,
    /// Warm-up: misses on a key's new server retried on its previous server.
    pub warmup_fallbacks: Counter,
    /// Warm-up: those retries that found the value (returned to the client, or copied before the
    /// client's command).
    pub warmup_recovered: Counter,
    /// Warm-up: values copied to the new server.
    pub warmup_copies: Counter,
    /// Warm-up: copies refused because the key was written or deleted on the new server meanwhile.
    pub warmup_copies_refused: Counter,
    /// Split keys: reads sent to a copy other than the owner.
    pub split_reads: Counter,
    /// Split keys: reads a copy did not hold, read from the owner instead.
    pub split_copy_misses: Counter,
    /// Split keys: copies filled from the owner.
    pub split_fills: Counter,
    /// Split keys: fills refused because a write deleted the copy meanwhile.
    pub split_fills_refused: Counter,
    /// Split keys: copies deleted after a write of the key (or before its first spread read).
    pub split_invalidations: Counter,
    /// Split keys: copy deletes that failed (the write was answered with an error).
    pub split_invalidations_failed: Counter,
    /// Requests sent to the gutter pool because their server was ejected.
    pub gutter_requests: Counter,
    /// `get`s answered from the hot-key cache.
    pub hot_cache_hits: Counter,
    /// Replies stored in the hot-key cache.
    pub hot_cache_fills: Counter,
    /// Hot-key cache entries dropped by a write through the proxy.
    pub hot_cache_invalidations: Counter,
    /// Requests refused because a key of theirs was over its rate limit (`--key-rate-limit`).
    pub key_rate_limited: Counter,
    /// Requests refused because the pool was over its rate limit (`--pool-rate-limit`).
    pub pool_rate_limited: Counter,
    /// Redis transactions (`MULTI` … `EXEC`) sent to a server.
    pub transactions: Counter,
    /// Redis transactions the proxy discarded because a command in them was refused (`EXECABORT`).
    pub transactions_aborted: Counter,
    /// Redis blocking commands (`BLPOP`, `XREAD … BLOCK`, …) sent on a connection of their own.
    pub blocking_requests: Counter,
    /// Redis channels, shard channels and patterns subscribed to (`SUBSCRIBE` and the rest: one a
    /// name).
    pub subscriptions: Counter,
    /// The pool's heaviest keys at the last refresh (none when detection is off), heaviest first.
    pub hot_keys: arc_swap::ArcSwapOption<HotKeysReport>,
    /// Each command's latency, from its request decoded to its answer ready (for protocols that name
    /// their commands: Redis); empty otherwise.
    pub commands: Box<[CommandLatency]>,
}

/// One command's latency histogram.
#[derive(Debug)]
pub struct CommandLatency {
    /// The command's name, as the protocol names it (`get`, `mget`).
    pub name: &'static str,
    /// Its latency.
    pub latency: Histogram,
}

/// A pool's heaviest keys at one refresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKeysReport {
    /// The sliding window the counts cover (each count covers between half of it and all of it).
    pub window_ms: u64,
    /// The keys, heaviest first.
    pub keys: Vec<HotKeyRow>,
}

/// One of a pool's heaviest keys, as the stats show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKeyRow {
    /// The key (bytes that are not UTF-8 shown as U+FFFD).
    pub key: String,
    /// Its estimated requests over the window (never below the true count).
    pub count: u64,
    /// The server it goes to now, `None` when none is live.
    pub server: Option<String>,
}

impl PoolStats {
    /// Fresh tallies for the pool `name`.
    pub fn new(name: &str) -> PoolStats {
        PoolStats {
            name: name.to_owned(),
            ..PoolStats::default()
        }
    }

    /// Fresh tallies for the pool `name`, with a latency histogram for each of `commands`.
    pub fn with_commands(name: &str, commands: &[&'static str]) -> PoolStats {
        PoolStats {
            commands: commands
                .iter()
                .map(|&name| CommandLatency {
                    name,
                    latency: Histogram::default(),
                })
                .collect(),
            ..PoolStats::new(name)
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
    /// Which placements it serves.
    pub placements: Placements,
}

/// The placements a pool serves, as digests ([`crate::config::PlacementSpec::digest`]): what
/// `shardring migrate` compares across the proxies of a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placements {
    /// The current membership's.
    pub current: String,
    /// The next membership's; the current one's when the pool has no next membership (or one
    /// equal to it): no dual writes.
    pub next: String,
    /// What `current` is the digest of ([`crate::config::PlacementSpec::canonical_text`]): so that
    /// a digest that differs from the one wanted can be told apart server by server.
    pub current_text: String,
    /// What `next` is the digest of.
    pub next_text: String,
    /// The split keys' digest ([`crate::config::SplitConfig::digest`]); empty when the pool splits
    /// no key: what every proxy of the pool must agree on before a key's next phase.
    pub split: String,
}

/// Unix time now, in seconds (for `server_ejected_at`); 0 if the clock is before 1970.
pub fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_inclusive_upper_bounds_and_overflow_lands_in_inf() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_micros(51));
        h.observe(Duration::from_secs(5));
        let (buckets, sum_us) = h.read();
        assert_eq!(buckets[0], 1, "50us is in le=50us");
        assert_eq!(buckets[1], 1, "51us is in le=100us");
        assert_eq!(buckets[BUCKETS_US.len()], 1, "5s is only in +Inf");
        assert_eq!(buckets.iter().sum::<u64>(), 3);
        assert_eq!(sum_us, 5_000_101);
    }
}
