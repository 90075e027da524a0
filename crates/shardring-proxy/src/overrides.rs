//! The flag rules: how `shardring proxy`'s flags become the pools' proxy-only settings.
//!
//! A twemproxy file has no keys for the proxy-only settings (and extra keys would make it unreadable
//! by nutcracker), so the command line gives them, the same to every pool except `--replicas POOL=R`.
//! The CLI only parses its flags into an [`Overrides`]; what each flag sets, on which protocol's pools,
//! and which combinations are refused is decided here, beside the settings themselves, and applied
//! alike at start, by `-t` and on every reload.

use std::path::PathBuf;
use std::time::Duration;

use shardring::compat::twemproxy::TwemproxyServer;

use crate::config::{
    ConfigErrors, GutterConfig, HotKeysConfig, ListenerTls, MemcacheConfig, PoolConfig,
    ProtocolConfig, ProxyConfig, RedisConfig, Remedies, SentinelConfig, ServerTlsConfig,
};

/// The proxy-only settings given on the command line, one field a flag, as parsed. [`Default`] is
/// the command line without any of these flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Overrides {
    /// `--max-value-size`: a memcached pool's value limit (the servers are then not asked theirs)
    /// and a redis pool's argument limit. By default, none: each protocol's own default.
    pub max_value_size: Option<usize>,
    /// `--max-request-size`: a redis pool's request limit. By default, none (Redis's own).
    pub max_request_size: Option<usize>,
    /// `--multiget-all-or-nothing`: a memcached multi-get fails whole when one server fails. By
    /// default, false.
    pub multiget_all_or_nothing: bool,
    /// `--health-check-interval`: how often every server is probed. By default, this is 1 s.
    pub health_check_interval: Duration,
    /// `--hot-keys K`: track each memcached pool's K heaviest keys. By default, none (off).
    pub hot_keys: Option<u16>,
    /// `--hot-keys-window`: the window the hot-key counts cover. By default, this is 10 s.
    pub hot_keys_window: Duration,
    /// `--hot-cache-ttl`: serve the hot keys' replies from the proxy for this long. By default,
    /// none (detection only).
    pub hot_cache_ttl: Option<Duration>,
    /// `--hot-cache-size`: the hot-key cache's bound in bytes. By default, none (1 MiB).
    pub hot_cache_size: Option<usize>,
    /// `--replicas [POOL=]R`, in command-line order: `(None, R)` for every memcached pool,
    /// `(Some(pool), R)` for one pool, memcached or redis (which wins over the plain one; a later
    /// flag wins over an earlier one). By default, none (one copy of each key).
    pub replicas: Vec<(Option<String>, u16)>,
    /// `--replica-read-miss`: with replicas, a miss also tries the next replica. By default, false.
    pub replica_read_miss: bool,
    /// `--gutter`: the gutter servers of every memcached pool. By default, none (no gutter).
    pub gutter: Vec<TwemproxyServer>,
    /// `--gutter-ttl`: the longest TTL, in seconds, of a value stored in the gutter. By default,
    /// this is 10.
    pub gutter_ttl: u32,
    /// `--warmup-window`: how long a memcached pool's moved keys are still found on their previous
    /// server after a reload. By default, none (off).
    pub warmup_window: Option<Duration>,
    /// `--redis-user [POOL=]NAME`, in command-line order, as `--replicas`: the ACL user redis pools
    /// authenticate as (with `redis_auth` as its password). By default, none (`default`).
    pub redis_user: Vec<(Option<String>, String)>,
    /// `--redis-dedicated-connections N`: each redis server's bound on connections of their own
    /// (`WATCH`, blocking commands). By default, none (64).
    pub redis_dedicated_connections: Option<u32>,
    /// `--tls-cert [POOL=]PATH`, and the TLS flags below that take a path, in command-line order as
    /// `--replicas`: a plain value for every pool, `POOL=` for one (which wins). By default, none
    /// (no TLS on the listeners).
    pub tls_cert: Vec<(Option<String>, PathBuf)>,
    /// `--tls-key [POOL=]PATH`: the listener certificate's key.
    pub tls_key: Vec<(Option<String>, PathBuf)>,
    /// `--tls-client-ca [POOL=]PATH`: clients must present a certificate from these CAs.
    pub tls_client_ca: Vec<(Option<String>, PathBuf)>,
    /// `--server-tls[=POOL]`: TLS to the servers of every pool (`None`) or of the named ones. By
    /// default, none (plain TCP).
    pub server_tls: Vec<Option<String>>,
    /// `--server-ca [POOL=]PATH`: the CAs servers' certificates must chain to (else the system's).
    pub server_ca: Vec<(Option<String>, PathBuf)>,
    /// `--server-cert [POOL=]PATH`: the client certificate the proxy shows its servers.
    pub server_cert: Vec<(Option<String>, PathBuf)>,
    /// `--server-key [POOL=]PATH`: its key.
    pub server_key: Vec<(Option<String>, PathBuf)>,
    /// `--server-tls-insecure[=POOL]`: servers' certificates are not checked (tests only).
    pub server_tls_insecure: Vec<Option<String>>,
    /// `--sentinel POOL=HOST:PORT,…`: a redis pool's Sentinels. By default, none.
    pub sentinel: Vec<(Option<String>, Vec<String>)>,
    /// `--sentinel-auth POOL=PASSWORD`: their password. By default, none.
    pub sentinel_auth: Vec<(Option<String>, String)>,
    /// `--redis-partial-reads[=POOL]`: a redis pool's split reads answer in part when a server
    /// fails (error elements), every redis pool (`None`) or the named ones. By default, none.
    pub redis_partial_reads: Vec<Option<String>>,
}

/// The pools a per-pool flag names.
fn pools_named<T>(values: &[(Option<String>, T)]) -> Vec<&str> {
    values.iter().filter_map(|(p, _)| p.as_deref()).collect()
}

/// The value a per-pool flag gives `pool`: its own (the last `POOL=` one), else the last plain one.
fn for_pool<'a, T>(values: &'a [(Option<String>, T)], pool: &str) -> Option<&'a T> {
    let own = values
        .iter()
        .rev()
        .find(|(p, _)| p.as_deref() == Some(pool));
    own.or_else(|| values.iter().rev().find(|(p, _)| p.is_none()))
        .map(|(_, v)| v)
}

/// Whether a switch given as `--flag` (every pool) or `--flag=POOL` is on for `pool`.
fn switched_on(switches: &[Option<String>], pool: &str) -> bool {
    switches
        .iter()
        .any(|p| p.as_deref().is_none_or(|p| p == pool))
}

impl Default for Overrides {
    fn default() -> Overrides {
        Overrides {
            max_value_size: None,
            max_request_size: None,
            multiget_all_or_nothing: false,
            health_check_interval: Duration::from_secs(1),
            hot_keys: None,
            hot_keys_window: Duration::from_secs(10),
            hot_cache_ttl: None,
            hot_cache_size: None,
            replicas: Vec::new(),
            replica_read_miss: false,
            gutter: Vec::new(),
            gutter_ttl: 10,
            warmup_window: None,
            redis_user: Vec::new(),
            redis_dedicated_connections: None,
            tls_cert: Vec::new(),
            tls_key: Vec::new(),
            tls_client_ca: Vec::new(),
            server_tls: Vec::new(),
            server_ca: Vec::new(),
            server_cert: Vec::new(),
            server_key: Vec::new(),
            server_tls_insecure: Vec::new(),
            sentinel: Vec::new(),
            sentinel_auth: Vec::new(),
            redis_partial_reads: Vec::new(),
        }
    }
}

impl Overrides {
    /// Sets every pool's proxy-only settings from the flags, then checks every pool with them. The
    /// memcached-only remedies (replicas, warm-up, gutter, hot keys) given for every pool go to the
    /// memcached pools only (see [`Overrides::unused_by_redis`]); a flag that names a redis pool
    /// for one is a flag error.
    ///
    /// # Errors
    /// Every problem: each pool's settings checked with the flags' values in them
    /// ([`ProxyConfig::validate`]), then the flags' own (a redis pool, or a pool the file does not
    /// have, named by `--replicas`).
    pub fn apply(&self, mut config: ProxyConfig) -> Result<ProxyConfig, ConfigErrors> {
        let mut flag_errors = ConfigErrors::default();
        for pool in &mut config.pools {
            pool.health_check_interval = self.health_check_interval;
            self.tls(pool, &mut flag_errors);
            let named = self
                .replicas
                .iter()
                .rev()
                .find(|(p, _)| p.as_deref() == Some(pool.name.as_str()))
                .map(|(_, r)| *r);
            let every = self
                .replicas
                .iter()
                .rev()
                .find(|(p, _)| p.is_none())
                .map(|(_, r)| *r);
            match &mut pool.protocol {
                ProtocolConfig::Memcache(m) => {
                    self.memcache(&pool.name, m, named.or(every), &mut flag_errors);
                }
                ProtocolConfig::Redis(r) => self.redis(&pool.name, r, named, &mut flag_errors),
            }
        }
        let mut errors = config.validate().err().unwrap_or_default();
        errors.problems.extend(flag_errors.problems);
        // The files last, and only when the flags make sense: -t, the start and every reload read
        // them, so a certificate that cannot be used is refused like a bad config.
        if errors.problems.is_empty() {
            for pool in &config.pools {
                if let Err(e) = crate::tls::PoolTls::of(pool) {
                    errors.problems.extend(e.problems);
                }
            }
        }
        self.unknown_pools(&config, &mut errors);
        errors.into_result().map(|()| config)
    }

    /// What the flags set on the memcached pool `name` (`replicas`: its count, its own or every
    /// pool's), and the redis-only flags that name it, refused.
    fn memcache(
        &self,
        name: &str,
        m: &mut MemcacheConfig,
        replicas: Option<u16>,
        errors: &mut ConfigErrors,
    ) {
        if [
            pools_named(&self.sentinel),
            pools_named(&self.sentinel_auth),
        ]
        .iter()
        .any(|names| names.contains(&name))
        {
            errors.push(
                name,
                "--sentinel: redis pools only, and this is a memcached pool".into(),
            );
        }
        if self
            .redis_user
            .iter()
            .any(|(p, _)| p.as_deref() == Some(name))
        {
            errors.push(
                name,
                "redis user: redis pools only, and this is a memcached pool".into(),
            );
        }
        if self
            .redis_partial_reads
            .iter()
            .any(|p| p.as_deref() == Some(name))
        {
            errors.push(
                name,
                "--redis-partial-reads: redis pools only, and this is a memcached pool".into(),
            );
        }
        if let Some(size) = self.max_value_size {
            m.limits.max_value_len = size;
            m.limits.value_len_from_servers = false;
        }
        m.multiget_all_or_nothing = self.multiget_all_or_nothing;
        m.remedies = self.remedies(replicas);
    }

    /// What the flags set on the redis pool `name` (`replicas`: its own count only: one given for
    /// every pool is the memcached pools' remedy, and redis pools, often stores, are named to take
    /// it).
    fn redis(
        &self,
        name: &str,
        r: &mut RedisConfig,
        replicas: Option<u16>,
        errors: &mut ConfigErrors,
    ) {
        if let Some(size) = self.max_value_size {
            r.limits.max_bulk_len = size;
        }
        if let Some(size) = self.max_request_size {
            r.limits.max_request_len = size;
        }
        let user = self
            .redis_user
            .iter()
            .rev()
            .find(|(p, _)| p.as_deref() == Some(name))
            .or_else(|| self.redis_user.iter().rev().find(|(p, _)| p.is_none()));
        if let Some((_, user)) = user {
            r.user = Some(user.clone());
        }
        if let Some(n) = self.redis_dedicated_connections {
            r.dedicated_connections = n;
        }
        r.partial_reads = switched_on(&self.redis_partial_reads, name);
        r.hot_keys = self.hot_keys_config();
        r.sentinel = for_pool(&self.sentinel, name).map(|addrs| SentinelConfig {
            addrs: addrs.clone(),
            password: for_pool(&self.sentinel_auth, name).cloned(),
        });
        if r.sentinel.is_none() && for_pool(&self.sentinel_auth, name).is_some() {
            errors.push(name, "--sentinel-auth needs --sentinel".into());
        }
        if let Some(n) = replicas {
            r.replicas = usize::from(n);
        }
    }

    /// Every flag that names a pool the file does not have, refused.
    fn unknown_pools(&self, config: &ProxyConfig, errors: &mut ConfigErrors) {
        let named_pools = [
            (
                "--replicas",
                self.replicas
                    .iter()
                    .filter_map(|(p, _)| p.as_deref())
                    .collect::<Vec<_>>(),
            ),
            (
                "--redis-user",
                self.redis_user
                    .iter()
                    .filter_map(|(p, _)| p.as_deref())
                    .collect(),
            ),
            ("--sentinel", pools_named(&self.sentinel)),
            (
                "--redis-partial-reads",
                self.redis_partial_reads
                    .iter()
                    .flatten()
                    .map(String::as_str)
                    .collect(),
            ),
            ("--sentinel-auth", pools_named(&self.sentinel_auth)),
            ("--tls-cert", pools_named(&self.tls_cert)),
            ("--tls-key", pools_named(&self.tls_key)),
            ("--tls-client-ca", pools_named(&self.tls_client_ca)),
            (
                "--server-tls",
                self.server_tls
                    .iter()
                    .flatten()
                    .map(String::as_str)
                    .collect(),
            ),
            ("--server-ca", pools_named(&self.server_ca)),
            ("--server-cert", pools_named(&self.server_cert)),
            ("--server-key", pools_named(&self.server_key)),
            (
                "--server-tls-insecure",
                self.server_tls_insecure
                    .iter()
                    .flatten()
                    .map(String::as_str)
                    .collect(),
            ),
        ];
        for (flag, names) in named_pools {
            for name in names {
                if !config.pools.iter().any(|p| p.name == name) {
                    errors.push("", format!("{flag} names no pool of the file: {name:?}"));
                }
            }
        }
    }

    /// Sets `pool`'s TLS from the flags, pushing what does not fit together.
    fn tls(&self, pool: &mut PoolConfig, errors: &mut ConfigErrors) {
        let name = pool.name.clone();
        let mut problem = |p: &str| errors.push(&name, p.to_owned());
        let cert = for_pool(&self.tls_cert, &pool.name);
        let key = for_pool(&self.tls_key, &pool.name);
        let client_ca = for_pool(&self.tls_client_ca, &pool.name);
        pool.tls = match (cert, key) {
            (Some(cert), Some(key)) => Some(ListenerTls {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: client_ca.cloned(),
            }),
            (None, None) => {
                if client_ca.is_some() {
                    problem("--tls-client-ca needs --tls-cert and --tls-key");
                }
                None
            }
            _ => {
                problem("--tls-cert and --tls-key go together");
                None
            }
        };
        if pool.tls.is_some() && matches!(pool.listen, crate::config::Listen::Unix { .. }) {
            problem("TLS listeners take a TCP listen address, not a unix socket");
        }
        let on = switched_on(&self.server_tls, &pool.name);
        let insecure = switched_on(&self.server_tls_insecure, &pool.name);
        let server = ServerTlsConfig {
            ca: for_pool(&self.server_ca, &pool.name).cloned(),
            cert: for_pool(&self.server_cert, &pool.name).cloned(),
            key: for_pool(&self.server_key, &pool.name).cloned(),
            insecure,
        };
        if !on {
            if server != ServerTlsConfig::default() {
                problem("--server-ca, --server-cert, --server-key and --server-tls-insecure need --server-tls");
            }
            pool.server_tls = None;
            return;
        }
        if server.cert.is_some() != server.key.is_some() {
            problem("--server-cert and --server-key go together");
        }
        if server.insecure && server.ca.is_some() {
            problem(
                "--server-tls-insecure checks no certificate, so --server-ca would not be used",
            );
        }
        // twemproxy's unix-socket servers are absolute paths.
        if pool.servers.iter().any(|s| s.host.starts_with('/')) {
            problem("--server-tls: TLS is for TCP servers, and this pool has a unix-socket server");
        }
        pool.server_tls = Some(server);
    }

    /// A memcached pool's remedies from the flags, with `replicas` copies of each key (1 when not
    /// given).
    fn remedies(&self, replicas: Option<u16>) -> Remedies {
        Remedies {
            hot_keys: self.hot_keys_config(),
            replicas: replicas.map_or(1, usize::from),
            replica_read_miss: self.replica_read_miss,
            gutter: (!self.gutter.is_empty()).then(|| GutterConfig {
                servers: self.gutter.clone(),
                ttl_cap: self.gutter_ttl,
            }),
            warmup_window: self.warmup_window,
        }
    }

    /// The hot-key settings from the flags (either protocol's pools take them).
    fn hot_keys_config(&self) -> Option<HotKeysConfig> {
        self.hot_keys.map(|k| {
            let mut h = HotKeysConfig::new(usize::from(k));
            h.window = self.hot_keys_window;
            h.cache_ttl = self.hot_cache_ttl;
            if let Some(size) = self.hot_cache_size {
                h.cache_bytes = size as u64;
            }
            h
        })
    }

    /// The remedy flags given for every pool that the redis pools of `config` do not take, as one
    /// line a redis pool for the user (nothing when there are none).
    pub fn unused_by_redis(&self, config: &ProxyConfig) -> Vec<String> {
        let flags = [
            ("--replicas", self.replicas.iter().any(|(p, _)| p.is_none())),
            ("--warmup-window", self.warmup_window.is_some()),
            ("--gutter", !self.gutter.is_empty()),
        ];
        let given: Vec<&str> = flags
            .iter()
            .filter(|(_, on)| *on)
            .map(|(f, _)| *f)
            .collect();
        if given.is_empty() {
            return Vec::new();
        }
        config
            .pools
            .iter()
            .filter(|p| p.is_redis())
            .map(|p| {
                format!(
                    "{} {} to memcached pools only, not to redis pool {:?}",
                    given.join(", "),
                    if given.len() == 1 { "applies" } else { "apply" },
                    p.name
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Limits, RedisLimits};

    /// A memcached pool `mc` (two servers) and a redis pool `rd` (one).
    const TWO_POOLS: &str =
        "mc:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:2:1\n   - 127.0.0.1:5:1\n\
         rd:\n  listen: 127.0.0.1:3\n  redis: true\n  servers:\n   - 127.0.0.1:4:1\n";

    /// [`TWO_POOLS`] with `flags` applied.
    fn overridden(flags: &Overrides) -> Result<ProxyConfig, ConfigErrors> {
        flags.apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
    }

    #[test]
    fn without_flags_every_pool_keeps_the_files_settings_and_the_defaults() {
        let config = overridden(&Overrides::default()).unwrap();
        assert_eq!(config, ProxyConfig::from_yaml(TWO_POOLS).unwrap());
    }

    #[test]
    fn size_flags_set_both_protocols_limits() {
        let defaults = overridden(&Overrides::default()).unwrap();
        let (mc, rd) = (&defaults.pools[0], &defaults.pools[1]);
        assert_eq!(mc.memcache().unwrap().limits, Limits::default());
        assert_eq!(rd.redis().unwrap().limits, RedisLimits::default());
        let set = overridden(&Overrides {
            max_value_size: Some(2048),
            max_request_size: Some(8192),
            ..Overrides::default()
        })
        .unwrap();
        let (mc, rd) = (&set.pools[0], &set.pools[1]);
        // The value limit is both protocols' (memcached's value, Redis's argument).
        let limits = mc.memcache().unwrap().limits;
        assert_eq!(limits.max_value_len, 2048);
        // Given explicitly, it is the limit: the servers are not asked theirs.
        assert!(!limits.value_len_from_servers);
        let limits = rd.redis().unwrap().limits;
        assert_eq!(limits.max_bulk_len, 2048);
        assert_eq!(limits.max_request_len, 8192);
    }

    #[test]
    fn remedy_flags_reach_memcached_pools_and_leave_redis_pools_alone() {
        let flags = Overrides {
            replicas: vec![(None, 1)],
            warmup_window: Some(Duration::from_millis(500)),
            gutter: vec!["127.0.0.1:9:1".parse().unwrap()],
            hot_keys: Some(10),
            ..Overrides::default()
        };
        let config = overridden(&flags).unwrap();
        let (mc, rd) = (&config.pools[0], &config.pools[1]);
        assert!(!mc.is_redis() && rd.is_redis());
        let r = mc.remedies();
        assert!(r.warmup_window.is_some() && r.gutter.is_some() && r.hot_keys.is_some());
        assert_eq!(rd.remedies(), &Remedies::default());
        // Hot keys are both protocols'.
        assert_eq!(rd.hot_keys(), mc.hot_keys());
        assert!(rd.hot_keys().is_some());
        assert_eq!(
            flags.unused_by_redis(&config),
            [
                "--replicas, --warmup-window, --gutter apply to memcached pools only, \
              not to redis pool \"rd\""
            ]
        );
    }

    #[test]
    fn a_redis_pool_takes_the_replica_count_that_names_it_and_no_pool_of_the_file_is_an_error() {
        for (pool, problem) in [
            (
                "rd",
                "rd: replicas must be between 1 and the number of servers (1), not 2",
            ),
            ("nope", "--replicas names no pool of the file: \"nope\""),
        ] {
            let flags = Overrides {
                replicas: vec![(Some(pool.to_owned()), 2)],
                ..Overrides::default()
            };
            let errors = overridden(&flags).unwrap_err();
            let text: Vec<String> = errors.problems.iter().map(ToString::to_string).collect();
            assert_eq!(text, [problem]);
        }
        let one = Overrides {
            replicas: vec![(Some("rd".to_owned()), 1), (None, 2)],
            ..Overrides::default()
        };
        let config = overridden(&one).unwrap();
        assert_eq!(config.pools[1].redis().unwrap().replicas, 1);
        // The plain count is the memcached pools'.
        assert_eq!(config.pools[0].remedies().replicas, 2);
        let three = TWO_POOLS.replace(
            "   - 127.0.0.1:4:1\n",
            "   - 127.0.0.1:4:1\n   - 127.0.0.1:6:1\n",
        );
        let flags = Overrides {
            replicas: vec![(Some("rd".to_owned()), 2)],
            ..Overrides::default()
        };
        let config = flags
            .apply(ProxyConfig::from_yaml(&three).unwrap())
            .unwrap();
        assert_eq!(config.pools[1].redis().unwrap().replicas, 2);
    }

    #[test]
    fn redis_flags_reach_redis_pools_and_a_user_needs_a_password() {
        let flags = Overrides {
            redis_user: vec![(None, "app".into())],
            redis_dedicated_connections: Some(8),
            ..Overrides::default()
        };
        // The file's redis pool has no redis_auth: a user without a password is refused.
        let errors = overridden(&flags).unwrap_err();
        assert!(
            errors
                .to_string()
                .contains("rd: redis user \"app\" needs a password: set redis_auth in the pool"),
            "{errors}"
        );
        let with_auth = TWO_POOLS.replace("redis: true\n", "redis: true\n  redis_auth: s3cret\n");
        let config = flags
            .apply(ProxyConfig::from_yaml(&with_auth).unwrap())
            .unwrap();
        let rd = config.pools[1].redis().unwrap();
        assert_eq!(rd.user.as_deref(), Some("app"));
        assert_eq!(rd.dedicated_connections, 8);
        for (pool, problem) in [
            (
                "mc",
                "mc: redis user: redis pools only, and this is a memcached pool",
            ),
            ("nope", "--redis-user names no pool of the file: \"nope\""),
        ] {
            let flags = Overrides {
                redis_user: vec![(Some(pool.to_owned()), "app".into())],
                ..Overrides::default()
            };
            let errors = flags
                .apply(ProxyConfig::from_yaml(&with_auth).unwrap())
                .unwrap_err();
            let text: Vec<String> = errors.problems.iter().map(ToString::to_string).collect();
            assert_eq!(text, [problem]);
        }
    }

    #[test]
    fn partial_reads_are_off_unless_asked_for_and_for_redis_pools_only() {
        let config = Overrides::default()
            .apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
            .unwrap();
        assert!(!config.pools[1].redis().unwrap().partial_reads);
        for switch in [None, Some("rd".to_owned())] {
            let flags = Overrides {
                redis_partial_reads: vec![switch],
                ..Overrides::default()
            };
            let config = flags
                .apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
                .unwrap();
            assert!(config.pools[1].redis().unwrap().partial_reads);
        }
        for (pool, problem) in [
            (
                "mc",
                "mc: --redis-partial-reads: redis pools only, and this is a memcached pool",
            ),
            (
                "nope",
                "--redis-partial-reads names no pool of the file: \"nope\"",
            ),
        ] {
            let flags = Overrides {
                redis_partial_reads: vec![Some(pool.to_owned())],
                ..Overrides::default()
            };
            let errors = flags
                .apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
                .unwrap_err();
            let text: Vec<String> = errors.problems.iter().map(ToString::to_string).collect();
            assert_eq!(text, [problem]);
        }
    }

    #[test]
    fn a_pools_own_replica_count_wins_over_the_plain_one_and_is_checked_like_the_files() {
        let flags = Overrides {
            replicas: vec![(Some("mc".to_owned()), 2), (None, 1)],
            ..Overrides::default()
        };
        assert_eq!(overridden(&flags).unwrap().pools[0].remedies().replicas, 2);
        // More replicas than servers is refused as the file's settings are (`-t` says so).
        let flags = Overrides {
            replicas: vec![(None, 3)],
            ..Overrides::default()
        };
        let errors = overridden(&flags).unwrap_err();
        assert!(
            errors
                .to_string()
                .contains("mc: replicas must be between 1 and the number of servers (2), not 3"),
            "{errors}"
        );
    }

    /// A certificate for 127.0.0.1 and its key, self-signed, as PEM files in `dir`; a second key
    /// that matches nothing beside them.
    fn certificate_files(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let paths = (dir.join("c.pem"), dir.join("c.key"), dir.join("other.key"));
        std::fs::write(&paths.0, cert.pem()).unwrap();
        std::fs::write(&paths.1, key.serialize_pem()).unwrap();
        std::fs::write(
            &paths.2,
            rcgen::KeyPair::generate().unwrap().serialize_pem(),
        )
        .unwrap();
        paths
    }

    #[test]
    fn tls_flags_reach_the_pools_they_name_and_their_files_are_checked() {
        let dir =
            std::env::temp_dir().join(format!("shardring-overrides-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key, other_key) = certificate_files(&dir);
        let flags = Overrides {
            tls_cert: vec![(None, cert.clone())],
            tls_key: vec![(None, key.clone())],
            server_tls: vec![Some("rd".into())],
            server_ca: vec![(Some("rd".into()), cert.clone())],
            ..Overrides::default()
        };
        let config = overridden(&flags).unwrap();
        let (mc, rd) = (&config.pools[0], &config.pools[1]);
        assert_eq!(mc.tls.as_ref().map(|t| &t.cert), Some(&cert));
        assert_eq!(rd.tls.as_ref().map(|t| &t.key), Some(&key));
        assert_eq!(mc.server_tls, None);
        assert_eq!(
            rd.server_tls.as_ref().and_then(|t| t.ca.as_ref()),
            Some(&cert)
        );

        let missing = dir.join("missing.pem");
        for (flags, problem) in [
            (
                Overrides {
                    tls_cert: vec![(None, cert.clone())],
                    ..Overrides::default()
                },
                "--tls-cert and --tls-key go together",
            ),
            (
                Overrides {
                    tls_client_ca: vec![(None, cert.clone())],
                    ..Overrides::default()
                },
                "--tls-client-ca needs --tls-cert and --tls-key",
            ),
            (
                Overrides {
                    server_ca: vec![(None, cert.clone())],
                    ..Overrides::default()
                },
                "need --server-tls",
            ),
            (
                Overrides {
                    server_tls: vec![Some("nope".into())],
                    ..Overrides::default()
                },
                "--server-tls names no pool of the file: \"nope\"",
            ),
            (
                Overrides {
                    server_tls: vec![None],
                    server_tls_insecure: vec![None],
                    server_ca: vec![(None, cert.clone())],
                    ..Overrides::default()
                },
                "--server-ca would not be used",
            ),
            (
                Overrides {
                    tls_cert: vec![(None, cert.clone())],
                    tls_key: vec![(None, other_key.clone())],
                    ..Overrides::default()
                },
                "the key does not match the certificate",
            ),
            (
                Overrides {
                    server_tls: vec![None],
                    server_ca: vec![(None, missing.clone())],
                    ..Overrides::default()
                },
                "missing.pem: No such file",
            ),
        ] {
            let errors = overridden(&flags).unwrap_err().to_string();
            assert!(errors.contains(problem), "{problem}: {errors}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sentinel_flags_need_a_redis_pool_whose_servers_are_named_for_their_groups() {
        let sentinels = vec!["127.0.0.1:26379".to_owned()];
        let flags = Overrides {
            sentinel: vec![(Some("rd".into()), sentinels.clone())],
            sentinel_auth: vec![(Some("rd".into()), "s3cret".into())],
            ..Overrides::default()
        };
        // TWO_POOLS's redis server line has no name: it cannot be a master group.
        let errors = overridden(&flags).unwrap_err().to_string();
        assert!(
            errors.contains("every server line needs a name"),
            "{errors}"
        );
        let named = TWO_POOLS.replace("   - 127.0.0.1:4:1\n", "   - 127.0.0.1:4:1 cache-a\n");
        let config = flags
            .apply(ProxyConfig::from_yaml(&named).unwrap())
            .unwrap();
        let sentinel = config.pools[1].redis().unwrap().sentinel.clone().unwrap();
        assert_eq!(sentinel.addrs, sentinels);
        assert_eq!(sentinel.password.as_deref(), Some("s3cret"));
        for (flags, problem) in [
            (
                Overrides {
                    sentinel: vec![(Some("mc".into()), sentinels.clone())],
                    ..Overrides::default()
                },
                "--sentinel: redis pools only",
            ),
            (
                Overrides {
                    sentinel_auth: vec![(None, "s3cret".into())],
                    ..Overrides::default()
                },
                "--sentinel-auth needs --sentinel",
            ),
            (
                Overrides {
                    sentinel: vec![(Some("nope".into()), sentinels.clone())],
                    ..Overrides::default()
                },
                "--sentinel names no pool of the file",
            ),
        ] {
            let errors = flags
                .apply(ProxyConfig::from_yaml(&named).unwrap())
                .unwrap_err()
                .to_string();
            assert!(errors.contains(problem), "{problem}: {errors}");
        }
    }
}
