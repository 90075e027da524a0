//! One Redis pool's settings as its requests are planned with them: `redis_auth`, `redis_db`, the
//! limits and what a split read answers (its replicas and hot keys are the pool's
//! [`Remedies`](crate::protocol::route::Remedies), as a memcached pool's are). Plain values, read by the planner, the commands
//! the proxy answers itself (`local.rs`) and the features (`features/`); the protocol value that
//! holds them is in `plan.rs`.

use shardring_resp::ReplyLimits;

use super::merge::PartialReads;
use super::request::Limits;
use crate::config::{PoolConfig, RedisConfig};

/// A Redis pool's settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `redis_auth`: what clients must AUTH with, and what the proxy AUTHs its connections with.
    pub(crate) auth: Option<String>,
    /// The ACL user `redis_auth` is the password of (`--redis-user`); `None` for Redis's `default`.
    pub(crate) user: Option<String>,
    /// `redis_db`: the database every server connection SELECTs.
    pub(crate) db: u32,
    /// Client request limits.
    pub(crate) limits: Limits,
    /// Server reply limits.
    pub(crate) reply_limits: ReplyLimits,
    /// What a split read answers when a server fails (`--redis-partial-reads`).
    pub(crate) partial_reads: PartialReads,
    /// What the commands across every server (`SCAN`, `KEYS`, …) need of the pool.
    pub(crate) span: SpanScope,
}

/// What the commands across every server (`features/span/`) need of the pool: which servers hold
/// its keys, an identity of that list for `SCAN`'s cursors, and `KEYS`'s guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpanScope {
    /// How many servers hold the pool's keys: the file's servers, indexes `0..servers` (those a
    /// planned change adds come after them, and hold copies only).
    pub(crate) servers: usize,
    /// A digest of those servers' addresses, in order, and of `redis_db`: a `SCAN` cursor carries
    /// part of it, so a cursor made before the list changed is refused, not misread.
    pub(crate) membership: u64,
    /// The most keys a `KEYS` answer may hold (`--redis-keys-limit`).
    pub(crate) keys_limit: u64,
}

impl SpanScope {
    /// The scope of `config`'s pool, whose redis settings are `redis`.
    fn of(config: &PoolConfig, redis: &RedisConfig) -> SpanScope {
        // A cluster pool's keys are on the masters that serve slots, listed first (`crate::cluster`):
        // not on the masters without slots nor the replicas after them.
        let holders = match redis.cluster.as_ref() {
            Some(c) => {
                let table = c.slots.as_deref();
                (0..config.servers.len())
                    .take_while(|&i| table.is_some_and(|t| t.serves_any(i)))
                    .count()
            }
            None => config.servers.len(),
        };
        // xxh3: deterministic, so every proxy with the same server list makes the same cursors and
        // a client's scan may go on through any of them.
        let mut digest = xxhash_rust::xxh3::Xxh3::new();
        for server in &config.servers[..holders] {
            digest.update(server.address().as_bytes());
            digest.update(b"\n");
        }
        digest.update(&redis.db.to_le_bytes());
        SpanScope {
            servers: holders,
            membership: digest.digest(),
            keys_limit: redis.keys_limit,
        }
    }
}

impl Settings {
    /// The settings of `config`'s pool.
    pub(crate) fn from_pool(config: &PoolConfig) -> Settings {
        // Only a redis pool is served by this protocol (`pool/mod.rs` picks it by the pool's
        // protocol); the defaults stand in rather than a panic.
        let defaults = RedisConfig::default();
        let settings = config.redis().unwrap_or(&defaults);
        Settings {
            auth: settings.auth.clone(),
            user: settings.user.clone(),
            db: settings.db,
            limits: Limits {
                max_bulk_len: settings.limits.max_bulk_len,
                max_request_len: settings.limits.max_request_len,
                ..Limits::default()
            },
            reply_limits: ReplyLimits::default(),
            partial_reads: if settings.partial_reads {
                PartialReads::Answered
            } else {
                PartialReads::Refused
            },
            span: SpanScope::of(config, settings),
        }
    }
}
