//! # shardring-config
//!
//! The proxy's configuration: twemproxy's (nutcracker's) YAML, read with every problem reported at
//! once and each with its line ([`read_pools`]), into one [`PoolConfig`] per pool, plus the settings
//! twemproxy has no key for (*proxy-only*, set by flags since nutcracker refuses unknown keys: which
//! flag sets what on which pools is the proxy's `flags`, each feature's group beside the feature).
//! What only one protocol can use is in the pool's [`ProtocolConfig`].
//!
//! A crate of its own, below the proxy: the CLI's `lookup` and `members`, `shardring migrate` and the
//! Python package read pool files without the proxy's runtime (tokio, rustls), and the proxy
//! (`shardring_proxy::config` re-exports this crate) adds what runs: its flags' rules, TLS files
//! loaded, pools built.
//!
//! Three lifetimes, as in shotover and linkerd: config (read and validated whole) → pools built once →
//! per-connection sessions. Every default is resolved at load, in [`PoolConfig`].

mod breakers;
mod changes;
mod cluster;
mod cluster_mark;
mod limits;
mod membership;
mod next;
mod placement;
mod pool;
mod problem;
mod protocol;
mod rate_limits;
mod split;
mod tls;
mod twemproxy_file;
pub(crate) mod twemproxy_keys;
mod yaml;

pub use self::breakers::BreakerConfig;
pub use self::changes::PoolChanges;
pub use self::cluster::{ClusterConfig, ReadPolicy, SlotTable, SLOTS};
pub use self::cluster_mark::{marked_pools, with_mark as with_cluster_mark};
pub use self::limits::{Limits, RedisLimits, MAX_KEY_LEN, VALUE_LEN_CEILING};
pub use self::membership::Membership;
pub use self::next::NextMembership;
pub use self::placement::{placement_differences, PlacementSpec};
pub use self::pool::{Listen, PoolConfig, DEFAULT_CLIENT_CONNECTIONS};
pub use self::problem::{ConfigErrors, ConfigProblem};
pub use self::protocol::{
    GutterConfig, HotKeysConfig, MemcacheConfig, MemcacheRemedies, ProtocolConfig, RedisConfig,
    Remedies, SentinelConfig,
};
pub use self::rate_limits::RateLimits;
pub use self::split::{
    escape as escape_split_key, fill_reservation, unescape as unescape_split_key, SplitConfig,
    SplitKey, SplitPhase,
};
pub use self::tls::{ListenerTls, ServerTlsConfig};
pub use self::twemproxy_file::read_pools;
pub use self::twemproxy_keys::parse_listen;
pub use shardring::compat::twemproxy::Distribution;
pub use shardring::hash::TwemproxyHash;

/// The whole proxy: its pools.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProxyConfig {
    /// The pools, in the file's order.
    pub pools: Vec<PoolConfig>,
}

impl ProxyConfig {
    /// Reads a twemproxy YAML configuration ([`read_pools`]), then checks what this proxy adds (see
    /// [`ProxyConfig::validate`]).
    ///
    /// # Errors
    /// Every problem: the reader's (with their lines) or, when it has none, the proxy's.
    pub fn from_yaml(text: &str) -> Result<ProxyConfig, ConfigErrors> {
        let mut proxy = ProxyConfig {
            pools: read_pools(text)?,
        };
        let mut errors = ConfigErrors::default();
        cluster_mark::apply(text, &mut proxy.pools, &mut errors);
        errors.into_result()?;
        proxy.validate()?;
        Ok(proxy)
    }

    /// The pool named `name`, or the only pool when `name` is `None`.
    ///
    /// # Errors
    /// When there is no such pool, or several and no name was given.
    pub fn pool(&self, name: Option<&str>) -> Result<&PoolConfig, ConfigErrors> {
        let names = || {
            self.pools
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut errors = ConfigErrors::default();
        match name {
            Some(n) => match self.pools.iter().find(|p| p.name == n) {
                Some(p) => return Ok(p),
                None => errors.push("", format!("no pool named {n:?}; pools: {}", names())),
            },
            None if self.pools.len() == 1 => return Ok(&self.pools[0]),
            None => errors.push(
                "",
                format!(
                    "the configuration has several pools; name one of: {}",
                    names()
                ),
            ),
        }
        Err(errors)
    }

    /// This configuration with each pool's next membership taken from `next` (`--next-config`):
    /// the pool of the same name there gives its servers, hash, hash tag and distribution; nothing
    /// else of it is read (its listen address, timeouts and the rest stay the current file's). A
    /// pool that `next` does not name has no next membership.
    ///
    /// # Errors
    /// A pool of `next` that this configuration does not have (a typo would otherwise silently
    /// plan nothing), or one that speaks the other protocol.
    pub fn with_next(mut self, next: &ProxyConfig) -> Result<ProxyConfig, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for n in &next.pools {
            match self.pools.iter_mut().find(|p| p.name == n.name) {
                None => errors.push(
                    &n.name,
                    "the next configuration has this pool; the current one does not".into(),
                ),
                Some(p) if p.is_redis() != n.is_redis() => errors.push(
                    &n.name,
                    "the next configuration speaks the other protocol (redis:)".into(),
                ),
                Some(p) => p.next = Some(NextMembership::of(n)),
            }
        }
        errors.into_result()?;
        Ok(self)
    }

    /// Every problem with every pool, all at once, so a user fixes a config in one go.
    ///
    /// # Errors
    /// All of them.
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn yaml_pools_map_onto_the_proxy_config() {
        let c = ProxyConfig::from_yaml(
            "alpha:\n  listen: 127.0.0.1:22121\n  hash: md5\n  hash_tag: \"{}\"\n  timeout: 400\n  auto_eject_hosts: true\n  tcpkeepalive: true\n  servers:\n   - 127.0.0.1:11211:2 cache-a\n   - 127.0.0.1:11212:1\n",
        )
        .unwrap();
        let p = &c.pools[0];
        assert_eq!(p.listen.to_string(), "127.0.0.1:22121");
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
        assert!(
            err.problems
                .iter()
                .any(|p| p.to_string().contains("line 3")),
            "{err}"
        );
        let ok = ProxyConfig::from_yaml(
            "alpha:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_auth: pw\n  redis_db: 3\n  servers:\n   - 127.0.0.1:6379:1\n",
        )
        .unwrap();
        let r = ok.pools[0].redis().expect("a redis pool");
        assert_eq!((r.auth.as_deref(), r.db), (Some("pw"), 3));
    }

    #[test]
    fn redis_pools_are_accepted_and_checked_like_the_others() {
        let mut p = PoolConfig::new("alpha", "127.0.0.1:0", &["127.0.0.1:1:1"]).unwrap();
        p.protocol = ProtocolConfig::Redis(RedisConfig::default());
        p.server_connections = 0;
        let errs = ProxyConfig { pools: vec![p] }.validate().unwrap_err();
        assert_eq!(errs.problems.len(), 1, "{errs}");
        assert!(errs.problems[0].to_string().contains("server_connections"));
    }

    #[test]
    fn listen_takes_unix_sockets() {
        let p = PoolConfig::new("p", "/tmp/x.sock 0666", &["127.0.0.1:1:1"]).unwrap();
        assert_eq!(
            p.listen,
            Listen::Unix {
                path: "/tmp/x.sock".into(),
                permissions: 0o666
            }
        );
        // A bad mode is refused, not dropped.
        assert!(PoolConfig::new("p", "/tmp/x.sock 1000", &["127.0.0.1:1:1"]).is_err());
    }
}
