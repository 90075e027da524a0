//! The proxy's settings: one [`PoolConfig`] per twemproxy pool, field for field twemproxy's YAML keys with
//! twemproxy's defaults, plus a few settings twemproxy has no key for (each marked *proxy-only*).
//!
//! This crate does not parse YAML itself: [`ProxyConfig::from_yaml`] runs the library's twemproxy reader
//! ([`shardring::compat::twemproxy_config`], which reports every problem with its line) and maps its pools
//! onto these structs. Tests build them directly with [`PoolConfig::new`].

use std::fmt;
use std::time::Duration;

pub use shardring::compat::twemproxy::Distribution;
use shardring::compat::twemproxy::TwemproxyServer;
use shardring::compat::twemproxy_config::{self, Config};
pub use shardring::hash::TwemproxyHash;

use crate::protocol::memcache::Limits;

/// Where a pool accepts clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// `host:port`.
    Tcp(String),
    /// `/path/to/socket [mode]`: a unix socket, created with the octal permissions `mode` when given.
    Unix {
        /// The socket's path.
        path: String,
        /// Its permissions, e.g. `0o666`.
        mode: Option<u32>,
    },
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(addr) => f.write_str(addr),
            Listen::Unix { path, mode: None } => f.write_str(path),
            Listen::Unix {
                path,
                mode: Some(m),
            } => write!(f, "{path} {m:o}"),
        }
    }
}

/// One pool: a listen address, servers, and how keys are placed on them.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// The pool's name (the YAML mapping key); stats are keyed by it.
    pub name: String,
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
    /// `preconnect`: connect to every server at start. By default, false.
    pub preconnect: bool,
    /// `tcpkeepalive`: turn on TCP keepalive (`SO_KEEPALIVE`) on server connections and on the pool's
    /// client connections, as nutcracker does, so a peer that vanished without a FIN is noticed. By
    /// default, false.
    pub tcpkeepalive: bool,
    /// `redis`: refused, this proxy speaks memcached only.
    pub redis: bool,
    /// `server_connections`: connections per server. By default, this is 1.
    pub server_connections: u32,
    /// `auto_eject_hosts`: take failing servers out of the placement. By default, false.
    pub auto_eject_hosts: bool,
    /// `server_retry_timeout`: how long an ejected server stays out before it is probed again. By
    /// default, this is 30 s.
    pub server_retry_timeout: Duration,
    /// `server_failure_limit`: consecutive failures that eject a server. By default, this is 2.
    pub server_failure_limit: u32,
    /// `servers`: `host:port:weight [name]`.
    pub servers: Vec<TwemproxyServer>,
    /// `client_connections`: the most clients at once; 0 means [`DEFAULT_CLIENT_CONNECTIONS`].
    /// nutcracker 0.5.0 reads this key and then ignores it; this proxy enforces it.
    pub client_connections: u32,
    /// *proxy-only*: how often every server is probed with `version` (on a fresh connection, answered
    /// within the pool's `timeout`, or 1 s when it has none). By default, this is 1 s. twemproxy's YAML
    /// has no key for it: `shardring proxy --health-check-interval` sets it for every pool.
    pub health_check_interval: Duration,
    /// *proxy-only*: a multi-get fails whole when one server fails (twemproxy's behaviour). By default,
    /// false: the keys that could be fetched are returned. `shardring proxy --multiget-all-or-nothing`.
    pub multiget_all_or_nothing: bool,
    /// *proxy-only*: key, value and line limits (`shardring proxy --max-value-size` sets the value limit).
    pub limits: Limits,
}

/// The client cap when `client_connections` is 0.
pub const DEFAULT_CLIENT_CONNECTIONS: u32 = 16_384;

impl PoolConfig {
    /// A pool with twemproxy's defaults listening on `listen`, serving `servers` (`host:port:weight
    /// [name]` strings).
    ///
    /// # Errors
    /// The servers that do not parse.
    pub fn new(name: &str, listen: &str, servers: &[&str]) -> Result<PoolConfig, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        let mut parsed = Vec::new();
        for s in servers {
            match s.parse::<TwemproxyServer>() {
                Ok(sc) => parsed.push(sc),
                Err(e) => errors.push(name, format!("server {s:?}: {e}")),
            }
        }
        errors.into_result()?;
        Ok(PoolConfig {
            name: name.to_owned(),
            listen: parse_listen(listen),
            hash: TwemproxyHash::Fnv1a64,
            hash_tag: None,
            distribution: Distribution::Ketama,
            timeout: None,
            backlog: 512,
            preconnect: false,
            tcpkeepalive: false,
            redis: false,
            server_connections: 1,
            auto_eject_hosts: false,
            server_retry_timeout: Duration::from_secs(30),
            server_failure_limit: 2,
            servers: parsed,
            client_connections: 0,
            health_check_interval: Duration::from_secs(1),
            multiget_all_or_nothing: false,
            limits: Limits::default(),
        })
    }

    /// Every problem with this pool, all at once.
    pub fn validate(&self, errors: &mut ConfigErrors) {
        let n = &self.name;
        let before = errors.problems.len();
        if self.redis {
            errors.push(
                n,
                "redis: true is not supported: shardring proxy speaks the memcached protocol only"
                    .into(),
            );
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
        if self.health_check_interval.is_zero() {
            errors.push(n, "the health check interval must be greater than 0".into());
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
        // The placement is only worth building when the servers themselves are fine.
        if errors.problems.len() == before {
            if let Err(e) = crate::router::build_placement(self, &vec![true; self.servers.len()]) {
                errors.push(n, e.to_string());
            }
        }
    }
}

impl PoolConfig {
    /// Maps a pool read by the library's twemproxy reader, taking this proxy's defaults for the settings
    /// twemproxy has no key for. `redis_auth` and `redis_db` (redis only) have no effect.
    pub fn from_twemproxy(p: &twemproxy_config::Pool) -> PoolConfig {
        let listen = match &p.listen {
            twemproxy_config::Listen::Tcp { host, port } if host.contains(':') => {
                Listen::Tcp(format!("[{host}]:{port}"))
            }
            twemproxy_config::Listen::Tcp { host, port } => Listen::Tcp(format!("{host}:{port}")),
            twemproxy_config::Listen::Unix { path, permissions } => Listen::Unix {
                path: path.clone(),
                mode: (*permissions != 0).then_some(*permissions),
            },
        };
        PoolConfig {
            name: p.name.clone(),
            listen,
            hash: p.hash,
            hash_tag: p.hash_tag,
            distribution: p.distribution,
            timeout: p.timeout.map(|ms| Duration::from_millis(u64::from(ms))),
            backlog: p.backlog,
            preconnect: p.preconnect,
            tcpkeepalive: p.tcpkeepalive,
            redis: p.redis,
            server_connections: p.server_connections,
            auto_eject_hosts: p.auto_eject_hosts,
            server_retry_timeout: Duration::from_millis(u64::from(p.server_retry_timeout)),
            server_failure_limit: p.server_failure_limit,
            servers: p.servers.clone(),
            client_connections: p.client_connections,
            health_check_interval: Duration::from_secs(1),
            multiget_all_or_nothing: false,
            limits: Limits::default(),
        }
    }
}

/// Parses twemproxy's `listen` value: `host:port`, or a path (`/…`) with an optional octal mode.
pub fn parse_listen(s: &str) -> Listen {
    let s = s.trim();
    if s.starts_with('/') {
        let mut parts = s.split_whitespace();
        let path = parts.next().unwrap_or_default().to_owned();
        let mode = parts.next().and_then(|m| u32::from_str_radix(m, 8).ok());
        Listen::Unix { path, mode }
    } else {
        Listen::Tcp(s.to_owned())
    }
}

/// The whole proxy: its pools.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProxyConfig {
    /// The pools, in the file's order.
    pub pools: Vec<PoolConfig>,
}

impl ProxyConfig {
    /// Reads a twemproxy YAML configuration with the library's reader and maps every pool; then checks
    /// what this proxy adds (see [`ProxyConfig::validate`]).
    ///
    /// # Errors
    /// Every problem: the reader's (with their lines) or, when it has none, the proxy's.
    pub fn from_yaml(text: &str) -> Result<ProxyConfig, ConfigErrors> {
        let config = Config::parse(text).map_err(|e| ConfigErrors {
            problems: match e {
                shardring::Error::InvalidConfig { problems } => problems
                    .iter()
                    .map(|p| match (p.line, p.key.is_empty()) {
                        (0, true) => p.message.clone(),
                        (0, false) => format!("{}: {}", p.key, p.message),
                        (l, true) => format!("line {l}: {}", p.message),
                        (l, false) => format!("line {l}: {}: {}", p.key, p.message),
                    })
                    .collect(),
                other => vec![other.to_string()],
            },
        })?;
        let proxy = ProxyConfig {
            pools: config
                .pools
                .iter()
                .map(PoolConfig::from_twemproxy)
                .collect(),
        };
        proxy.validate()?;
        Ok(proxy)
    }

    /// Every problem with every pool.
    ///
    /// # Errors
    /// All of them, so a user fixes a config in one go.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        if self.pools.is_empty() {
            errors.push("", "no pools".into());
        }
        let mut names = std::collections::HashSet::new();
        let mut listens = std::collections::HashSet::new();
        for p in &self.pools {
            if !names.insert(&p.name) {
                errors.push(&p.name, "duplicate pool name".into());
            }
            if !listens.insert(p.listen.to_string()) {
                errors.push(
                    &p.name,
                    format!("listen {} is used by another pool", p.listen),
                );
            }
            p.validate(&mut errors);
        }
        errors.into_result()
    }
}

/// One or more configuration problems.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.problems.join("; "))]
pub struct ConfigErrors {
    /// Each problem, prefixed with its pool's name.
    pub problems: Vec<String>,
}

impl ConfigErrors {
    /// Records a problem of pool `pool`.
    pub fn push(&mut self, pool: &str, problem: String) {
        if pool.is_empty() {
            self.problems.push(problem);
        } else {
            self.problems.push(format!("pool {pool}: {problem}"));
        }
    }

    /// `Ok` when there are no problems.
    ///
    /// # Errors
    /// `self` when there are.
    pub fn into_result(self) -> Result<(), ConfigErrors> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_pools_map_onto_the_proxy_config() {
        let c = ProxyConfig::from_yaml(
            "alpha:\n  listen: 127.0.0.1:22121\n  hash: md5\n  hash_tag: \"{}\"\n  timeout: 400\n  auto_eject_hosts: true\n  tcpkeepalive: true\n  servers:\n   - 127.0.0.1:11211:2 cache-a\n   - 127.0.0.1:11212:1\n",
        )
        .unwrap();
        let p = &c.pools[0];
        assert_eq!(p.listen, Listen::Tcp("127.0.0.1:22121".into()));
        assert_eq!(p.hash, TwemproxyHash::Md5);
        assert_eq!(p.hash_tag, Some(*b"{}"));
        assert_eq!(p.timeout, Some(Duration::from_millis(400)));
        assert!(p.auto_eject_hosts);
        assert!(p.tcpkeepalive);
        assert_eq!(p.servers[0].display_name(), "cache-a");
        assert_eq!(p.server_retry_timeout, Duration::from_secs(30));
    }

    #[test]
    fn yaml_problems_come_with_their_lines() {
        let err = ProxyConfig::from_yaml("alpha:\n  listen: 127.0.0.1:22121\n  colour: blue\n")
            .unwrap_err();
        assert!(err.problems.iter().any(|p| p.contains("line 3")), "{err}");
        let err = ProxyConfig::from_yaml(
            "alpha:\n  listen: 127.0.0.1:22121\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("redis"), "{err}");
    }

    #[test]
    fn redis_pools_are_refused_with_every_other_problem() {
        let mut p = PoolConfig::new("alpha", "127.0.0.1:0", &["127.0.0.1:1:1"]).unwrap();
        p.redis = true;
        p.server_connections = 0;
        let errs = ProxyConfig { pools: vec![p] }.validate().unwrap_err();
        assert_eq!(errs.problems.len(), 2, "{errs}");
        assert!(errs.problems[0].contains("redis"));
    }

    #[test]
    fn listen_takes_unix_sockets() {
        assert_eq!(
            parse_listen("/tmp/x.sock 0666"),
            Listen::Unix {
                path: "/tmp/x.sock".into(),
                mode: Some(0o666)
            }
        );
    }
}
