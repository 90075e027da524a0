//! One pool's configuration: twemproxy's keys with nutcracker's defaults (typed), plus the settings
//! twemproxy has no key for (each marked *proxy-only*). Every default is resolved here, once.

use std::fmt;
use std::time::Duration;

use shardring::compat::twemproxy::{Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;

use super::problem::ConfigErrors;
use super::twemproxy_keys::parse_listen;
use super::{Limits, RedisLimits};

/// Where a pool accepts clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// `host:port` (the host is not resolved until the proxy binds it).
    Tcp {
        /// The host or address as written (an IPv6 address without brackets).
        host: String,
        /// The port.
        port: u16,
    },
    /// A unix socket path, with the permissions to give it (0 when not given: the umask's).
    Unix {
        /// The socket path.
        path: String,
        /// Octal permissions, at most 0777.
        permissions: u32,
    },
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Listen::Tcp { host, port } => write!(f, "{host}:{port}"),
            Listen::Unix {
                path,
                permissions: 0,
            } => f.write_str(path),
            Listen::Unix { path, permissions } => write!(f, "{path} {permissions:o}"),
        }
    }
}

/// One pool: a listen address, servers, and how keys are placed on them.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// The pool's name (the YAML mapping key); stats are keyed by it.
    pub name: String,
    /// The line of the file the pool starts on (0 for a pool built in code).
    pub line: usize,
    /// `listen`.
    pub listen: Listen,
    /// `hash`: the key hash. By default, this is `fnv1a_64`.
    pub hash: TwemproxyHash,
    /// `hash_tag`: two bytes; when both occur in a key, only the part between them is hashed.
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution`. By default, this is ketama.
    pub distribution: Distribution,
    /// `timeout`: connect and response timeout. By default, none (twemproxy waits forever).
    pub timeout: Option<Duration>,
    /// `backlog`: the listen queue. By default, this is 512.
    pub backlog: u32,
    /// `client_connections`: the most clients at once; 0 means [`DEFAULT_CLIENT_CONNECTIONS`].
    /// nutcracker 0.5.0 reads this key and then ignores it; this proxy enforces it.
    pub client_connections: u32,
    /// `redis`: the pool speaks the Redis protocol. By default, false (memcached).
    pub redis: bool,
    /// `redis_auth`: the password clients must AUTH with, and that the proxy AUTHs its server
    /// connections with. By default, none.
    pub redis_auth: Option<String>,
    /// `redis_db`: the database the proxy SELECTs on its server connections. By default, 0.
    pub redis_db: u32,
    /// `preconnect`: connect to every server at start. By default, false.
    pub preconnect: bool,
    /// `auto_eject_hosts`: take failing servers out of the placement. By default, false.
    pub auto_eject_hosts: bool,
    /// `server_connections`: connections per server. By default, this is 1.
    pub server_connections: u32,
    /// `server_retry_timeout`: how long an ejected server stays out before it is probed again. By
    /// default, this is 30 s.
    pub server_retry_timeout: Duration,
    /// `server_failure_limit`: consecutive failures that eject a server. By default, this is 2.
    pub server_failure_limit: u32,
    /// `tcpkeepalive`: turn on TCP keepalive (`SO_KEEPALIVE`) on server connections and on the pool's
    /// client connections, as nutcracker does, so a peer that vanished without a FIN is noticed. By
    /// default, false.
    pub tcpkeepalive: bool,
    /// `servers`: `host:port:weight [name]`, in file order.
    pub servers: Vec<TwemproxyServer>,
    /// *proxy-only*: how often every server is probed (on a fresh connection, answered within the
    /// pool's `timeout`, or 1 s when it has none). By default, this is 1 s.
    /// `shardring proxy --health-check-interval` sets it for every pool.
    pub health_check_interval: Duration,
    /// *proxy-only*: a multi-get fails whole when one server fails (twemproxy's behaviour). By default,
    /// false: the keys that could be fetched are returned. `shardring proxy --multiget-all-or-nothing`.
    pub multiget_all_or_nothing: bool,
    /// *proxy-only*: key, value and line limits (`shardring proxy --max-value-size` sets the value limit).
    pub limits: Limits,
    /// *proxy-only*: a redis pool's argument and request limits; a request over them is refused
    /// with a protocol error and its connection closed, before its bytes are buffered (see
    /// `protocol::redis`). `shardring proxy --max-value-size` sets the argument limit too, and
    /// `--max-request-size` the request limit.
    pub redis_limits: RedisLimits,
    /// *proxy-only*: hot-key detection and the hot-key cache. By default, off.
    /// `shardring proxy --hot-keys K [--hot-cache-ttl MS]`. Read when the pool starts: a reload does not
    /// change it.
    pub hot_keys: Option<HotKeysConfig>,
    /// *proxy-only*: how many servers hold each key: the owner (placed exactly as nutcracker places it)
    /// then the ring's next distinct servers. Writes go to every live one; reads go to the first live
    /// one and fail over to the next on an error. By default, this is 1 (no replicas).
    /// `shardring proxy --replicas R`.
    pub replicas: usize,
    /// *proxy-only*: with replicas, a read that misses on one replica also tries the next (a restarted,
    /// empty replica then still reads the data its peers kept). By default, false.
    /// `shardring proxy --replica-read-miss`.
    pub replica_read_miss: bool,
    /// *proxy-only*: Facebook's gutter pool for a pool without replicas: while a server is ejected its
    /// keys go to these servers (placed among them as the pool places keys), with every TTL capped,
    /// instead of being rehashed over the pool's other servers. By default, none.
    /// `shardring proxy --gutter HOST:PORT,… [--gutter-ttl SECS]`.
    pub gutter: Option<GutterConfig>,
    /// *proxy-only*: for this long after a reload changes the ring, a `get` that misses on a key's new
    /// server is retried on its previous server, and a hit there is copied to the new server. By
    /// default, none (off). `shardring proxy --warmup-window MS`.
    pub warmup_window: Option<Duration>,
}

/// *proxy-only*: a gutter pool (see [`PoolConfig::gutter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GutterConfig {
    /// The gutter servers, `host:port:weight [name]` as in `servers`.
    pub servers: Vec<TwemproxyServer>,
    /// The longest TTL a value stored in the gutter gets, in seconds (at most 30 days). By default,
    /// this is 10 s: the gutter holds a dead server's hot keys for moments, not its data set.
    pub ttl_cap: u32,
}

/// *proxy-only*: hot-key detection (the top keys by requests over a sliding window) and the optional
/// cache of their replies.
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

/// The client cap when `client_connections` is 0.
pub const DEFAULT_CLIENT_CONNECTIONS: u32 = 16_384;

impl PoolConfig {
    /// A pool with twemproxy's defaults listening on `listen` (`host:port`, or `/path [mode]`), serving
    /// `servers` (`host:port:weight [name]` strings). Unlike in a file, port 0 is accepted: the system
    /// picks a free port (tests use it).
    ///
    /// # Errors
    /// The listen address and servers that do not parse.
    pub fn new(name: &str, listen: &str, servers: &[&str]) -> Result<PoolConfig, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        let any_port = listen
            .rsplit_once(':')
            .filter(|(host, port)| *port == "0" && !host.starts_with('/'))
            .map(|(host, _)| Listen::Tcp {
                host: host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port: 0,
            });
        let listen = any_port
            .map_or_else(|| parse_listen(listen), Ok)
            .unwrap_or_else(|e| {
                errors.push(name, format!("listen {listen:?} {e}"));
                Listen::Unix {
                    path: String::new(),
                    permissions: 0,
                }
            });
        let mut parsed = Vec::new();
        for s in servers {
            match s.parse::<TwemproxyServer>() {
                Ok(sc) => parsed.push(sc),
                Err(e) => errors.push(name, format!("server {s:?}: {e}")),
            }
        }
        errors.into_result()?;
        Ok(PoolConfig::with_defaults(
            name.to_owned(),
            0,
            listen,
            parsed,
        ))
    }

    /// A pool with every default.
    pub(super) fn with_defaults(
        name: String,
        line: usize,
        listen: Listen,
        servers: Vec<TwemproxyServer>,
    ) -> PoolConfig {
        PoolConfig {
            name,
            line,
            listen,
            hash: TwemproxyHash::Fnv1a64,
            hash_tag: None,
            distribution: Distribution::Ketama,
            timeout: None,
            backlog: 512,
            client_connections: 0,
            redis: false,
            redis_auth: None,
            redis_db: 0,
            preconnect: false,
            auto_eject_hosts: false,
            server_connections: 1,
            server_retry_timeout: Duration::from_secs(30),
            server_failure_limit: 2,
            tcpkeepalive: false,
            servers,
            health_check_interval: Duration::from_secs(1),
            multiget_all_or_nothing: false,
            limits: Limits::default(),
            redis_limits: RedisLimits::default(),
            hot_keys: None,
            replicas: 1,
            replica_read_miss: false,
            gutter: None,
            warmup_window: None,
        }
    }

    /// The client connection limit nutcracker 0.5.0 applies: always 0 (none), whatever the file says.
    pub fn nutcracker_client_connections(&self) -> u32 {
        0
    }

    /// The pool's placement with every server in: where nutcracker sends each key (names: the server's
    /// name, else `host:port`).
    ///
    /// # Errors
    /// The library's, e.g. for `distribution: random`, which places no key reproducibly.
    pub fn placement(&self) -> Result<Box<dyn shardring::Placement>, shardring::Error> {
        shardring::compat::twemproxy::placement(
            &self.servers,
            self.hash,
            self.hash_tag,
            self.distribution,
        )
    }

    /// The placement settings, for the router.
    pub fn placement_spec(&self) -> crate::router::PlacementSpec<'_> {
        crate::router::PlacementSpec {
            servers: &self.servers,
            hash: self.hash,
            hash_tag: self.hash_tag,
            distribution: self.distribution,
        }
    }

    /// Every problem with this pool that the file's reader does not see (settings made in code or by
    /// flags), all at once.
    pub fn validate(&self, errors: &mut ConfigErrors) {
        let n = &self.name;
        if matches!(&self.listen, Listen::Unix { path, .. } if path.is_empty()) {
            errors.push(n, "listen: no address".into());
        }
        if self.servers.is_empty() {
            errors.push(n, "servers: at least one server is needed".into());
        }
        if self.server_connections == 0 {
            errors.push(n, "server_connections must be at least 1".into());
        }
        if self.auto_eject_hosts && self.server_failure_limit == 0 {
            errors.push(n, "server_failure_limit must be at least 1".into());
        }
        if self.limits.max_key_len == 0 || self.limits.max_key_len > 250 {
            errors.push(n, "the key limit must be between 1 and 250".into());
        }
        if self.redis_limits.max_bulk_len == 0 || self.redis_limits.max_request_len == 0 {
            errors.push(
                n,
                "the redis argument and request limits must be at least 1 byte".into(),
            );
        }
        if self.health_check_interval.is_zero() {
            errors.push(n, "the health check interval must be greater than 0".into());
        }
        if self.replicas == 0 || self.replicas > self.servers.len().max(1) {
            errors.push(
                n,
                format!(
                    "replicas must be between 1 and the number of servers ({}), not {}",
                    self.servers.len(),
                    self.replicas
                ),
            );
        }
        if self.redis {
            // The miss-storm remedies read and write memcached's meta commands and TTLs: a redis
            // pool would take them silently and do none of it (or, with a gutter, keep dead servers'
            // keys there without a TTL cap).
            let set = [
                ("replicas", self.replicas > 1),
                ("a warm-up window", self.warmup_window.is_some()),
                ("a gutter", self.gutter.is_some()),
                ("hot-key detection", self.hot_keys.is_some()),
            ];
            for (what, _) in set.iter().filter(|(_, on)| *on) {
                errors.push(
                    n,
                    format!("{what}: memcached pools only, and this is a redis pool"),
                );
            }
        }
        if self.replicas > 1 && self.distribution == Distribution::Random {
            errors.push(
                n,
                "replicas need a reproducible distribution (ketama or modula), not random".into(),
            );
        }
        if let Some(g) = &self.gutter {
            if g.servers.is_empty() {
                errors.push(n, "the gutter needs at least one server".into());
            }
            if self.replicas > 1 {
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
            if self.distribution == Distribution::Random {
                errors.push(
                    n,
                    "a gutter needs a reproducible distribution (ketama or modula), not random"
                        .into(),
                );
            }
            for s in &g.servers {
                if self
                    .servers
                    .iter()
                    .any(|p| p.display_name() == s.display_name())
                {
                    errors.push(n, format!("gutter server {s} is also a pool server"));
                }
            }
        }
        if let Some(h) = &self.hot_keys {
            if h.top == 0 || h.top > 1000 {
                errors.push(n, "the hot-key count must be between 1 and 1000".into());
            }
            if h.window < Duration::from_millis(2) {
                errors.push(n, "the hot-key window must be at least 2 ms".into());
            }
            if h.cache_ttl.is_some_and(|t| t.is_zero()) {
                errors.push(n, "the hot-cache TTL must be greater than 0".into());
            }
            if h.cache_bytes == 0 {
                errors.push(n, "the hot-cache size must be at least 1 byte".into());
            }
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.servers {
            if s.weight == 0 {
                errors.push(n, format!("server {s}: weight must be at least 1"));
            }
            if !seen.insert(s.display_name()) {
                errors.push(n, format!("server {s}: duplicate server name or address"));
            }
        }
    }
}
