//! One pool's configuration: twemproxy's keys with nutcracker's defaults (typed), plus the settings
//! twemproxy has no key for (each marked *proxy-only*). Every default is resolved here, once. The
//! settings only one protocol has are in [`ProtocolConfig`].

use std::fmt;
use std::time::Duration;

use shardring::compat::twemproxy::{Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;

use super::breakers::BreakerConfig;
use super::next::NextMembership;
use super::placement::PlacementSpec;
use super::problem::ConfigErrors;
use super::protocol::{
    HotKeysConfig, MemcacheConfig, MemcacheRemedies, ProtocolConfig, RedisConfig, Remedies,
    NO_MEMCACHE_REMEDIES,
};
use super::rate_limits::RateLimits;
use super::twemproxy_keys::parse_listen;
use crate::tls::{ListenerTls, ServerTlsConfig};

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

/// One pool: a listen address, servers, how keys are placed on them, and the settings of the
/// protocol it speaks. The fields here mean the same for every protocol; what only one protocol
/// can use lives in [`PoolConfig::protocol`], so a setting a pool cannot serve cannot be set on it.
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
    /// `redis` (with `redis_auth` and `redis_db`), and the proxy-only settings of the protocol it
    /// picks. By default, a memcached pool with every default ([`ProtocolConfig::default`]).
    pub protocol: ProtocolConfig,
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
    /// *proxy-only*: TLS on the pool's listener. By default, none (plain TCP).
    /// `shardring proxy --tls-cert`, `--tls-key` and `--tls-client-ca` set it.
    pub tls: Option<ListenerTls>,
    /// *proxy-only*: TLS to the pool's servers. By default, none (plain TCP).
    /// `shardring proxy --server-tls` and the `--server-*` flags set it.
    pub server_tls: Option<ServerTlsConfig>,
    /// *proxy-only*: the membership the pool will have after a planned change; while it places keys
    /// differently, writes of the keys whose owner changes go to both owners ([`NextMembership`]).
    /// By default, none. `shardring proxy --next-config FILE` and etcd's `next/` set it.
    pub next: Option<NextMembership>,
    /// *proxy-only*: the remedies of both protocols (replicas, hot keys); a memcached pool's own
    /// are in its [`MemcacheConfig`]. By default, none is on.
    pub remedies: Remedies,
    /// *proxy-only*: each server's circuit breakers (a cap on pending requests, outlier
    /// ejection). By default, none: a slow server's requests wait as nutcracker's do.
    /// `shardring proxy --circuit-breakers` and its tuning flags.
    pub breakers: Option<BreakerConfig>,
    /// *proxy-only*: requests a second per hot key and per pool. By default, none.
    /// `shardring proxy --key-rate-limit`, `--pool-rate-limit`.
    pub rate_limits: RateLimits,
}

impl NextMembership {
    /// The placement of `pool` (its servers, hash, hash tag and distribution), as a next membership.
    pub fn of(pool: &PoolConfig) -> NextMembership {
        NextMembership {
            servers: pool.servers.clone(),
            hash: pool.hash,
            hash_tag: pool.hash_tag,
            distribution: pool.distribution,
            cluster: pool.cluster().cloned(),
        }
    }
}

/// The client cap when `client_connections` is 0.
pub const DEFAULT_CLIENT_CONNECTIONS: u32 = 16_384;

impl PoolConfig {
    /// The most clients the pool serves at once, over all its workers: `client_connections`, or
    /// [`DEFAULT_CLIENT_CONNECTIONS`] when it is 0.
    pub fn client_cap(&self) -> usize {
        match self.client_connections {
            0 => DEFAULT_CLIENT_CONNECTIONS as usize,
            n => n as usize,
        }
    }

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
            protocol: ProtocolConfig::default(),
            preconnect: false,
            auto_eject_hosts: false,
            server_connections: 1,
            server_retry_timeout: Duration::from_secs(30),
            server_failure_limit: 2,
            tcpkeepalive: false,
            servers,
            health_check_interval: Duration::from_secs(1),
            tls: None,
            server_tls: None,
            next: None,
            remedies: Remedies::default(),
            breakers: None,
            rate_limits: RateLimits::default(),
        }
    }

    /// While the next membership is a Redis Cluster and the pool is not one: what a cluster pool
    /// refuses (a `redis_db`, another `hash_tag`, replicas, split keys, Sentinel) is refused now,
    /// before any key is copied, not at the cut-over, whose reload would then be refused and leave
    /// the proxy on the old servers while the others serve the cluster.
    fn validate_cut_over_onto_a_cluster(&self, errors: &mut ConfigErrors) {
        let Some(next) = self.next.as_ref().filter(|n| n.cluster.is_some()) else {
            return;
        };
        if self.cluster().is_some() {
            return;
        }
        let mut without = self.clone();
        without.next = None;
        let mut after = without.clone();
        if let Some(r) = after.redis_mut() {
            r.cluster = next.cluster.clone();
        }
        let (mut now, mut then) = (ConfigErrors::default(), ConfigErrors::default());
        without.validate(&mut now);
        after.validate(&mut then);
        for p in then.problems {
            if !now.problems.contains(&p) {
                errors.push(
                    &self.name,
                    format!(
                        "the next membership is a Redis Cluster, and as a cluster pool this pool is refused: {}",
                        p.message
                    ),
                );
            }
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
        self.placement_spec().placement()
    }

    /// The placement settings, which the pool's key routing is built from.
    pub fn placement_spec(&self) -> PlacementSpec<'_> {
        PlacementSpec {
            servers: &self.servers,
            hash: self.hash,
            hash_tag: self.hash_tag,
            distribution: self.distribution,
        }
    }

    /// The next membership while it differs from the current one and can place keys (dual writes
    /// are on); `None` when there is no next membership, it equals the current one, or it is a
    /// cluster whose slot map is not read yet.
    pub fn planned_change(&self) -> Option<&NextMembership> {
        let next = self.next.as_ref()?;
        (next.placeable() && next.membership().digest() != self.membership().digest())
            .then_some(next)
    }

    /// What the pool's membership now is, as reported and compared: its ring's placement, or the
    /// cluster its seeds reach.
    pub fn membership(&self) -> crate::Membership<'_> {
        match self.cluster() {
            Some(c) => crate::Membership::Cluster(&c.seeds),
            None => crate::Membership::Ring(self.placement_spec()),
        }
    }

    /// Whether the pool speaks the Redis protocol (`redis: true`).
    pub fn is_redis(&self) -> bool {
        matches!(self.protocol, ProtocolConfig::Redis(_))
    }

    /// A memcached pool's settings; `None` for a Redis pool.
    pub fn memcache(&self) -> Option<&MemcacheConfig> {
        match &self.protocol {
            ProtocolConfig::Memcache(m) => Some(m),
            ProtocolConfig::Redis(_) => None,
        }
    }

    /// A memcached pool's settings, to change them; `None` for a Redis pool.
    pub fn memcache_mut(&mut self) -> Option<&mut MemcacheConfig> {
        match &mut self.protocol {
            ProtocolConfig::Memcache(m) => Some(m),
            ProtocolConfig::Redis(_) => None,
        }
    }

    /// A Redis pool's settings; `None` for a memcached pool.
    pub fn redis(&self) -> Option<&RedisConfig> {
        match &self.protocol {
            ProtocolConfig::Redis(r) => Some(r),
            ProtocolConfig::Memcache(_) => None,
        }
    }

    /// Makes `servers` the pool's servers: a ring over them, or, when `cluster` (a redis pool), a
    /// Redis Cluster whose seeds they are, its slot map not read yet (the pool's other cluster
    /// settings kept). A memcached pool is a ring whatever `cluster` says.
    pub fn set_servers(&mut self, servers: Vec<TwemproxyServer>, cluster: bool) {
        let seeds: Vec<String> = servers.iter().map(TwemproxyServer::address).collect();
        self.servers = servers;
        if let Some(redis) = self.redis_mut() {
            redis.cluster = cluster.then(|| crate::ClusterConfig {
                seeds: seeds.clone(),
                slots: None,
                ..redis
                    .cluster
                    .take()
                    .unwrap_or_else(|| crate::ClusterConfig::new(seeds))
            });
        }
    }

    /// A Redis Cluster pool's settings (`--redis-cluster`); `None` for any other pool.
    pub fn cluster(&self) -> Option<&crate::ClusterConfig> {
        self.redis().and_then(|r| r.cluster.as_ref())
    }

    /// A Redis pool's settings, to change them; `None` for a memcached pool.
    pub fn redis_mut(&mut self) -> Option<&mut RedisConfig> {
        match &mut self.protocol {
            ProtocolConfig::Redis(r) => Some(r),
            ProtocolConfig::Memcache(_) => None,
        }
    }

    /// A memcached pool's own remedies; for a Redis pool, which has none to set, every one off.
    /// Code that only asks "is a gutter on?" need not ask the protocol first.
    pub fn memcache_remedies(&self) -> &MemcacheRemedies {
        self.memcache()
            .map_or(&NO_MEMCACHE_REMEDIES, |m| &m.remedies)
    }

    /// How many servers hold each key (`--replicas`; 1: no replicas).
    pub fn replicas(&self) -> usize {
        self.remedies.replicas
    }

    /// The pool's hot-key settings: `None` when detection is off.
    pub fn hot_keys(&self) -> Option<&HotKeysConfig> {
        self.remedies.hot_keys.as_ref()
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
        if self.health_check_interval.is_zero() {
            errors.push(n, "the health check interval must be greater than 0".into());
        }
        self.remedies.validate(n, self.placement_spec(), errors);
        if let Some(b) = &self.breakers {
            b.validate(n, errors);
        }
        self.rate_limits
            .validate(n, self.remedies.hot_keys.is_some(), errors);
        match &self.protocol {
            ProtocolConfig::Memcache(m) => {
                m.validate(n, self.placement_spec(), self.remedies.replicas, errors)
            }
            ProtocolConfig::Redis(r) => r.validate(n, self.placement_spec(), errors),
        }
        if self.redis().is_some_and(|r| r.cluster.is_some()) {
            if self.remedies.replicas > 1 {
                errors.push(
                    n,
                    "--replicas and --redis-cluster: a cluster keeps its own replicas".into(),
                );
            }
            // The same cluster next is no change (a migration onto it, done).
            if self.next.as_ref().is_some_and(|next| {
                next.cluster.is_some() && next.membership().digest() != self.membership().digest()
            }) {
                errors.push(
                    n,
                    "a next membership that is another Redis Cluster, for a cluster pool: reshard the cluster itself"
                        .into(),
                );
            }
            if self.remedies.split.is_some() {
                errors.push(
                    n,
                    "--hot-key-split and --redis-cluster: a cluster node refuses a key of a slot it \
                     does not serve (MOVED), so no other node can hold a copy; use the hot-key cache \
                     (--hot-keys) or reads from replicas (--redis-cluster-reads)"
                        .into(),
                );
            }
        }
        self.validate_cut_over_onto_a_cluster(errors);
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
