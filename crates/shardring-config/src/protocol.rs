//! The settings that belong to one protocol: a pool is either a memcached pool, with memcached's limits,
//! multi-get policy and own miss-storm remedies, or a Redis pool, with Redis's authentication, database and
//! limits. Each protocol's settings live in its own variant, so a combination neither protocol can serve
//! (a Redis pool with a gutter, say) cannot be written down, and no check has to refuse it at run time.
//! What both protocols have (replicas, hot keys: [`Remedies`]) is the pool's, one type for both.

use std::time::Duration;

use shardring::compat::twemproxy::{Distribution, TwemproxyServer};

use super::problem::ConfigErrors;
use super::{ClusterConfig, Limits, PlacementSpec, RedisLimits, SplitConfig};

/// Which protocol a pool speaks, with that protocol's own settings (twemproxy's `redis: true/false`).
#[derive(Debug, Clone, PartialEq)]
pub enum ProtocolConfig {
    /// A memcached pool (`redis: false`, twemproxy's default).
    Memcache(MemcacheConfig),
    /// A Redis pool (`redis: true`).
    Redis(RedisConfig),
}

impl Default for ProtocolConfig {
    /// A memcached pool with every default, as twemproxy's pools are when the file says nothing.
    fn default() -> ProtocolConfig {
        ProtocolConfig::Memcache(MemcacheConfig::default())
    }
}

/// A memcached pool's settings: all *proxy-only* (twemproxy has no key for them; `shardring proxy`'s
/// flags set them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemcacheConfig {
    /// Key, value and line limits. By default, [`Limits::default`]: memcached's key limit, and the
    /// value limit the pool's servers report. `shardring proxy --max-value-size` sets the value limit.
    pub limits: Limits,
    /// A multi-get fails whole when one server fails (twemproxy's behaviour). By default, false: the
    /// keys that could be fetched are returned. `shardring proxy --multiget-all-or-nothing`.
    pub multiget_all_or_nothing: bool,
    /// The memcached pool's own miss-storm remedies (those of both protocols are the pool's
    /// [`Remedies`]). By default, none is on.
    pub remedies: MemcacheRemedies,
}

/// A pool's remedies that both protocols have: how many servers hold each key, and hot-key
/// detection. With [`Remedies::default`], both are off and the pool places and serves keys exactly
/// as nutcracker does.
#[derive(Debug, Clone, PartialEq)]
pub struct Remedies {
    /// Hot-key detection and the hot-key cache. By default, off.
    /// `shardring proxy --hot-keys K [--hot-cache-ttl MS]`. Read when the pool starts: a reload does
    /// not change it.
    pub hot_keys: Option<HotKeysConfig>,
    /// How many servers hold each key: the owner (placed exactly as nutcracker places it) then the
    /// ring's next distinct servers. Writes go to every live one (a Redis pool's writes are the
    /// commands Redis flags `write`); reads go to the first live one and fail over to the next on an
    /// error. By default, this is 1 (no replicas). `shardring proxy --replicas [POOL=]R`.
    pub replicas: usize,
    /// Hot keys kept on several servers, their reads spread over them, in the phase every proxy
    /// agrees on ([`SplitConfig`]). By default, none. `shardring proxy --hot-key-split [POOL=]S
    /// --hot-key-split-keys [POOL=]FILE`, the file read again on every reload.
    pub split: Option<SplitConfig>,
}

impl Default for Remedies {
    fn default() -> Remedies {
        Remedies {
            hot_keys: None,
            replicas: 1,
            split: None,
        }
    }
}

impl Remedies {
    /// Every problem with these settings in pool `n`, placed by `pool`: a replica count between 1
    /// and the servers, with a placement that can name each key's next servers.
    pub(super) fn validate(&self, n: &str, pool: PlacementSpec<'_>, errors: &mut ConfigErrors) {
        let replicas = self.replicas;
        if replicas == 0 || replicas > pool.servers.len().max(1) {
            errors.push(
                n,
                format!(
                    "replicas must be between 1 and the number of servers ({}), not {replicas}",
                    pool.servers.len(),
                ),
            );
        }
        if replicas > 1 && pool.distribution == Distribution::Random {
            errors.push(
                n,
                "replicas need a reproducible distribution (ketama or modula), not random".into(),
            );
        }
        if let Some(h) = &self.hot_keys {
            h.validate(n, errors);
        }
        if let Some(split) = &self.split {
            split.validate(n, pool.servers.len(), replicas, errors);
            if pool.distribution == Distribution::Random {
                errors.push(
                    n,
                    "split keys need a reproducible distribution (ketama or modula), not random"
                        .into(),
                );
            }
        }
    }
}

/// A memcached pool's own remedies for misses when servers fail or move: they read and write
/// memcached's own commands and TTLs, which is why only memcached pools have them. With
/// [`MemcacheRemedies::default`], every one is off.
#[derive(Debug, Clone, PartialEq)]
pub struct MemcacheRemedies {
    /// With replicas, a read that misses on one replica also tries the next (a restarted, empty
    /// replica then still reads the data its peers kept). By default, false.
    /// `shardring proxy --replica-read-miss`.
    pub replica_read_miss: bool,
    /// Facebook's gutter pool for a pool without replicas: while a server is ejected its keys go to
    /// these servers (placed among them as the pool places keys), with every TTL capped, instead of
    /// being rehashed over the pool's other servers. By default, none.
    /// `shardring proxy --gutter HOST:PORT,… [--gutter-ttl SECS]`.
    pub gutter: Option<GutterConfig>,
    /// For this long after a reload changes the ring, a `get` that misses on a key's new server is
    /// retried on its previous server, and a hit there is copied to the new server. By default, none
    /// (off). `shardring proxy --warmup-window MS`.
    pub warmup_window: Option<Duration>,
}

/// No memcached remedy on: what a Redis pool has, and what a memcached pool has by default.
pub(crate) static NO_MEMCACHE_REMEDIES: MemcacheRemedies = MemcacheRemedies {
    replica_read_miss: false,
    gutter: None,
    warmup_window: None,
};

impl Default for MemcacheRemedies {
    fn default() -> MemcacheRemedies {
        NO_MEMCACHE_REMEDIES.clone()
    }
}

/// A gutter pool (see [`MemcacheRemedies::gutter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GutterConfig {
    /// The gutter servers, `host:port:weight [name]` as in `servers`.
    pub servers: Vec<TwemproxyServer>,
    /// The longest TTL a value stored in the gutter gets, in seconds (at most 30 days). By default,
    /// this is 10 s: the gutter holds a dead server's hot keys for moments, not its data set.
    pub ttl_cap: u32,
}

impl GutterConfig {
    /// A gutter of `servers` with the default TTL cap (10 s).
    pub fn new(servers: Vec<TwemproxyServer>) -> GutterConfig {
        GutterConfig {
            servers,
            ttl_cap: 10,
        }
    }
}

/// Hot-key detection (the top keys by requests over a sliding window) and the optional cache of their
/// replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKeysConfig {
    /// How many keys are reported (and cached). `--hot-keys K`.
    pub top: usize,
    /// The window the counts cover. By default, this is 10 s. `--hot-keys-window MS`.
    pub window: Duration,
    /// Serve the top keys' `get` replies from the proxy for at most this long after each fill; `None`
    /// for detection only. By default, none. `--hot-cache-ttl MS`.
    pub cache_ttl: Option<Duration>,
    /// The cache's bound in bytes (keys, replies and 64 bytes per entry). By default, this is 1 MiB.
    /// `--hot-cache-size SIZE`.
    pub cache_bytes: u64,
}

impl HotKeysConfig {
    /// Every problem with these settings, keyed by pool `n`.
    fn validate(&self, n: &str, errors: &mut ConfigErrors) {
        if self.top == 0 || self.top > 1000 {
            errors.push(n, "the hot-key count must be between 1 and 1000".into());
        }
        if self.window < Duration::from_millis(2) {
            errors.push(n, "the hot-key window must be at least 2 ms".into());
        }
        if self.cache_ttl.is_some_and(|t| t.is_zero()) {
            errors.push(n, "the hot-cache TTL must be greater than 0".into());
        }
        if self.cache_bytes == 0 {
            errors.push(n, "the hot-cache size must be at least 1 byte".into());
        }
    }

    /// Detection of the top `top` keys, the defaults otherwise (10 s window, no cache).
    pub fn new(top: usize) -> HotKeysConfig {
        HotKeysConfig {
            top,
            window: Duration::from_secs(10),
            cache_ttl: None,
            cache_bytes: 1 << 20,
        }
    }
}

/// A Redis pool's settings: twemproxy's `redis_auth` and `redis_db`, and the *proxy-only* ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis_auth`: the password clients must AUTH with, and that the proxy AUTHs its server
    /// connections with. By default, none.
    pub auth: Option<String>,
    /// `redis_db`: the database the proxy SELECTs on its server connections. By default, 0.
    pub db: u32,
    /// *proxy-only*: the argument and request limits; a request over them is refused with a protocol
    /// error and its connection closed, before its bytes are buffered (see `protocol::redis`).
    /// `shardring proxy --max-value-size` sets the argument limit, and `--max-request-size` the
    /// request limit. By default, [`RedisLimits::default`] (Redis's own).
    pub limits: RedisLimits,
    /// *proxy-only*: the Redis 6 ACL user the proxy authenticates its server connections as, with
    /// `redis_auth` as its password (`AUTH user password`), and the user clients may name in `AUTH
    /// user password` and `HELLO 3 AUTH user password`. `shardring proxy --redis-user [POOL=]NAME`.
    /// By default, none: `AUTH password`, Redis's `default` user.
    pub user: Option<String>,
    /// *proxy-only*: how many connections of their own (beside the shared pipelined ones) each
    /// server may have at once, for clients inside a `WATCH` or running a blocking command. A client
    /// that needs one past this gets an error and nothing is sent. `shardring proxy
    /// --redis-dedicated-connections N`. By default, this is 64.
    pub dedicated_connections: u32,
    /// *proxy-only*: the Redis Sentinels that know each server's master. Each server line's name is
    /// its master group; the proxy connects to the master the Sentinels name and follows their
    /// `+switch-master`. `shardring proxy --sentinel POOL=HOST:PORT,…` (and `--sentinel-auth`). By
    /// default, none: the file's addresses.
    pub sentinel: Option<SentinelConfig>,
    /// *proxy-only*: a split read (`MGET`) one of whose servers fails answers the keys that could be
    /// read, and an error element for each other key, instead of failing whole. Redis's own `MGET`
    /// never has an error inside its array, and clients such as redis-py hand such an element to the
    /// application as the key's value. `shardring proxy --redis-partial-reads[=POOL]`. By default,
    /// false: one error naming the server, as nutcracker answers.
    pub partial_reads: bool,
    /// *proxy-only*: the most keys a `KEYS` answer may hold, counted over every server's reply; a
    /// `KEYS` that would answer more gets an error telling the client to use `SCAN`. The proxy holds
    /// every server's reply before it answers, so this bounds what one client's `KEYS` costs its
    /// memory. `shardring proxy --redis-keys-limit N`. By default, this is
    /// [`RedisConfig::DEFAULT_KEYS_LIMIT`] (1,000,000).
    pub keys_limit: u64,
    /// *proxy-only*: the pool's servers are a Redis Cluster's seed nodes, and keys are placed by the
    /// cluster's slot map instead of the pool's ring (`shardring proxy --redis-cluster`). By
    /// default, none: a ketama (or modula, random) pool of standalone servers.
    pub cluster: Option<ClusterConfig>,
}

/// A redis pool's Sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelConfig {
    /// `host:port` of each Sentinel, asked in turn.
    pub addrs: Vec<String>,
    /// The Sentinels' `requirepass`, if any (`--sentinel-auth`).
    pub password: Option<String>,
}

impl Default for RedisConfig {
    fn default() -> RedisConfig {
        RedisConfig {
            auth: None,
            db: 0,
            limits: RedisLimits::default(),
            user: None,
            dedicated_connections: 64,
            sentinel: None,
            partial_reads: false,
            keys_limit: RedisConfig::DEFAULT_KEYS_LIMIT,
            cluster: None,
        }
    }
}

impl MemcacheConfig {
    /// Every problem with these settings in pool `n`, placed by `pool`, whose keys are on
    /// `replicas` servers each (a gutter needs a reproducible placement, and no replicas).
    pub(super) fn validate(
        &self,
        n: &str,
        pool: PlacementSpec<'_>,
        replicas: usize,
        errors: &mut ConfigErrors,
    ) {
        if self.limits.max_key_len == 0 || self.limits.max_key_len > 250 {
            errors.push(n, "the key limit must be between 1 and 250".into());
        }
        let r = &self.remedies;
        if let Some(g) = &r.gutter {
            if g.servers.is_empty() {
                errors.push(n, "the gutter needs at least one server".into());
            }
            if replicas > 1 {
                errors.push(
                    n,
                    "a gutter is for pools without replicas: use --replicas or --gutter, not both"
                        .into(),
                );
            }
            if g.ttl_cap == 0 || g.ttl_cap > 30 * 24 * 3600 {
                errors.push(
                    n,
                    "the gutter TTL cap must be between 1 s and 30 days".into(),
                );
            }
            if pool.distribution == Distribution::Random {
                errors.push(
                    n,
                    "a gutter needs a reproducible distribution (ketama or modula), not random"
                        .into(),
                );
            }
            for s in &g.servers {
                if pool
                    .servers
                    .iter()
                    .any(|p| p.display_name() == s.display_name())
                {
                    errors.push(n, format!("gutter server {s} is also a pool server"));
                }
            }
        }
    }
}

impl RedisConfig {
    /// The default of [`RedisConfig::keys_limit`]: a million keys, some tens of megabytes of
    /// answer for typical key names; past that, `SCAN` is the way to list a keyspace.
    pub const DEFAULT_KEYS_LIMIT: u64 = 1_000_000;

    /// Every problem with these settings, keyed by pool `name`, placed by `pool`.
    pub(super) fn validate(&self, name: &str, pool: PlacementSpec<'_>, errors: &mut ConfigErrors) {
        if self.limits.max_bulk_len == 0 || self.limits.max_request_len == 0 {
            errors.push(
                name,
                "the redis argument and request limits must be at least 1 byte".into(),
            );
        }
        if let (Some(user), None) = (&self.user, &self.auth) {
            errors.push(
                name,
                format!("redis user {user:?} needs a password: set redis_auth in the pool"),
            );
        }
        if self
            .user
            .as_deref()
            .is_some_and(|u| u.is_empty() || u.contains(char::is_whitespace))
        {
            errors.push(
                name,
                "a redis user name cannot be empty or contain spaces".into(),
            );
        }
        if self.keys_limit == 0 {
            errors.push(name, "the KEYS limit must be at least 1 key".into());
        }
        if self.dedicated_connections == 0 {
            errors.push(
                name,
                "dedicated connections must be at least 1 per server".into(),
            );
        }
        if let Some(cluster) = &self.cluster {
            cluster.validate(name, self, pool, errors);
        }
        if let Some(sentinel) = &self.sentinel {
            if sentinel.addrs.is_empty() {
                errors.push(name, "--sentinel: at least one Sentinel address".into());
            }
            for s in pool.servers.iter().filter(|s| s.name.is_none()) {
                errors.push(
                    name,
                    format!(
                        "server {s}: with --sentinel every server line needs a name, its master group \
                         (host:port:weight group)"
                    ),
                );
            }
        }
    }
}
