//! Pools whose servers come from etcd (`shardring proxy --etcd URL`): each pool keeps its listen address
//! and settings from the YAML file and takes its servers from `<prefix><pool>/servers/` (the layout of
//! [`shardring_etcd::layout`]).
//!
//! A change in etcd is applied exactly as a SIGHUP reload applies a new file: [`Pool::reload`] with the
//! pool's current config and the new servers, one atomic swap; client connections stay open, requests
//! already routed finish on the old servers, servers whose address is unchanged keep their connections.
//! The rules are those of [`shardring::membership::Follower`]: a snapshot equal to the current servers
//! changes nothing, an older one is ignored, an empty one is refused (the servers kept) unless
//! `--allow-empty`.
//!
//! At start every pool is read once: when etcd cannot be reached that is an error, unless
//! `--etcd-fallback` asks to start from the YAML's servers (and keep retrying in the background). Once
//! running, losing etcd keeps the current servers; the source reconnects with back-off and resumes
//! from its last revision (see [`shardring_etcd::EtcdSource`]).
//!
//! Each pool's [`MembershipStats`] (revision, last update time, errors, malformed values) render as
//! twemproxy-JSON fields and Prometheus lines, for the metrics renderers to include.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardring::membership::{Member, MembershipSnapshot};
use shardring_etcd::{twemproxy_servers, EtcdError, EtcdSource, Update};
use tokio_util::sync::CancellationToken;

use crate::cluster::Pool;
use crate::config::ProxyConfig;

/// What `--etcd`, `--etcd-prefix`, `--etcd-fallback` and `--allow-empty` ask for.
#[derive(Debug, Clone)]
pub struct EtcdMembership {
    /// The etcd endpoints.
    endpoints: Vec<String>,
    /// The key prefix pools live under.
    prefix: String,
    /// Start from the YAML's servers when etcd cannot be read at start.
    fallback: bool,
    /// Apply a snapshot with no servers instead of refusing it.
    allow_empty: bool,
    /// How long bursts of changes are folded into one ring swap.
    debounce: Duration,
    /// The longest back-off between reconnection attempts.
    retry_max: Duration,
}

impl EtcdMembership {
    /// Servers from etcd at `endpoints`. By default the prefix is `/shardring/`, there is no fallback,
    /// empty snapshots are refused, the debounce is 100 ms and the back-off grows to 5 s.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> EtcdMembership {
        EtcdMembership {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: shardring_etcd::layout::DEFAULT_PREFIX.to_string(),
            fallback: false,
            allow_empty: false,
            debounce: Duration::from_millis(100),
            retry_max: Duration::from_secs(5),
        }
    }

    /// The key prefix. By default, this is `/shardring/`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> EtcdMembership {
        self.prefix = prefix.into();
        self
    }

    /// Start from the YAML's servers when etcd cannot be read at start. By default, this is `false`:
    /// that is an error.
    pub fn fallback(mut self, yes: bool) -> EtcdMembership {
        self.fallback = yes;
        self
    }

    /// Apply a snapshot with no servers (every request then fails). By default, this is `false`: it is
    /// refused and the servers kept.
    pub fn allow_empty(mut self, yes: bool) -> EtcdMembership {
        self.allow_empty = yes;
        self
    }

    /// The debounce. By default, this is 100 ms.
    pub fn debounce(mut self, debounce: Duration) -> EtcdMembership {
        self.debounce = debounce;
        self
    }

    /// The longest back-off between reconnection attempts. By default, this is 5 s.
    pub fn retry_max(mut self, wait: Duration) -> EtcdMembership {
        self.retry_max = wait;
        self
    }

    fn source(&self, pool: &str) -> EtcdSource {
        EtcdSource::builder(&self.endpoints, pool)
            .prefix(self.prefix.as_str())
            .debounce(self.debounce)
            .retry_max(self.retry_max)
            .build()
    }
}

/// Why membership could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipStartError {
    /// etcd could not be read and there is no fallback.
    #[error("pool {pool}: cannot read its servers from etcd (--etcd-fallback starts from the file's servers instead)")]
    Unreachable {
        /// The pool.
        pool: String,
        /// Why.
        #[source]
        source: EtcdError,
    },
    /// etcd has no servers for the pool and empty pools are not allowed.
    #[error("pool {pool}: etcd has no servers under {prefix} (publish them with `shardring members publish`, or pass --allow-empty)")]
    Empty {
        /// The pool.
        pool: String,
        /// The key prefix read.
        prefix: String,
    },
    /// The servers from etcd could not be swapped in.
    #[error("pool {pool}: the servers from etcd were refused: {reason}")]
    Refused {
        /// The pool.
        pool: String,
        /// Why.
        reason: String,
    },
}

/// One pool's membership counters. Relaxed atomics: each is a statistic read on its own.
#[derive(Debug)]
pub struct MembershipStats {
    /// The pool.
    pub pool: String,
    /// The etcd revision of the servers in use (0 while running on the file's servers).
    revision: AtomicU64,
    /// When the servers were last swapped, in seconds since the Unix epoch (0: never).
    updated_unix: AtomicU64,
    /// Refused snapshots, failed swaps and lost connections.
    errors: AtomicU64,
    /// Malformed server values seen (each skipped).
    malformed: AtomicU64,
}

impl MembershipStats {
    fn new(pool: &str) -> MembershipStats {
        MembershipStats {
            pool: pool.to_string(),
            revision: AtomicU64::new(0),
            updated_unix: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
        }
    }

    /// The etcd revision of the servers in use.
    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Relaxed)
    }

    /// When the servers were last swapped (Unix seconds; 0 when never).
    pub fn updated_unix(&self) -> u64 {
        self.updated_unix.load(Ordering::Relaxed)
    }

    /// Refused snapshots, failed swaps and lost connections so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Malformed server values seen so far.
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// The fields to add to the pool's object in twemproxy's stats JSON.
    pub fn json_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("membership_revision", self.revision().into()),
            ("membership_updated", self.updated_unix().into()),
            ("membership_errors", self.errors().into()),
            ("membership_malformed", self.malformed().into()),
        ]
    }

    /// Prometheus text for every pool in `stats` (HELP and TYPE once per metric).
    pub fn prometheus(stats: &[Arc<MembershipStats>]) -> String {
        let mut out = String::new();
        let metrics: [Metric; 4] = [
            (
                "membership_revision",
                "gauge",
                "The etcd revision of the pool's servers.",
                MembershipStats::revision,
            ),
            (
                "membership_updated_seconds",
                "gauge",
                "When the pool's servers last changed (Unix time).",
                MembershipStats::updated_unix,
            ),
            (
                "membership_errors_total",
                "counter",
                "Refused membership snapshots, failed swaps and lost etcd connections.",
                MembershipStats::errors,
            ),
            (
                "membership_malformed_total",
                "counter",
                "Malformed server values in etcd (each skipped).",
                MembershipStats::malformed,
            ),
        ];
        for (name, kind, help, value) in metrics {
            let _ = writeln!(out, "# HELP shardring_proxy_pool_{name} {help}");
            let _ = writeln!(out, "# TYPE shardring_proxy_pool_{name} {kind}");
            for s in stats {
                let _ = writeln!(
                    out,
                    "shardring_proxy_pool_{name}{{pool=\"{}\"}} {}",
                    s.pool.replace('\\', "\\\\").replace('"', "\\\""),
                    value(s)
                );
            }
        }
        out
    }
}

/// A metric's name, Prometheus type, help text and value.
type Metric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&MembershipStats) -> u64,
);

/// One pool following etcd.
struct Following {
    /// The pool whose servers are swapped.
    pool: Arc<Pool>,
    /// Its counters.
    stats: Arc<MembershipStats>,
    /// The servers in use as a snapshot (the file's at revision 0 until etcd is read).
    current: Mutex<MembershipSnapshot>,
    /// Whether empty snapshots apply.
    allow_empty: bool,
}

impl Following {
    /// Swaps in `snapshot`'s servers unless it is older, equal, or refused.
    fn apply(&self, snapshot: MembershipSnapshot) -> Result<(), String> {
        let Ok(mut current) = self.current.lock() else {
            return Err("membership state poisoned".into());
        };
        let name = &self.stats.pool;
        if snapshot.revision() < current.revision() {
            return Ok(());
        }
        if current.same_members(&snapshot) {
            self.stats
                .revision
                .store(snapshot.revision(), Ordering::Relaxed);
            *current = snapshot;
            return Ok(());
        }
        if snapshot.is_empty() && !self.allow_empty {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(pool = %name, revision = snapshot.revision(), "etcd has no servers for the pool; refused, the current servers stay (--allow-empty applies it)");
            return Err("empty".into());
        }
        let servers = twemproxy_servers(snapshot.members()).map_err(|e| e.to_string())?;
        let mut config = self.pool.current.load().config.clone();
        config.servers = servers;
        if let Err(e) = self.pool.reload(config) {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(pool = %name, error = %e, "servers from etcd refused; the current servers stay");
            return Err(e.to_string());
        }
        tracing::info!(pool = %name, revision = snapshot.revision(), servers = snapshot.members().len(), "servers from etcd swapped in");
        self.stats
            .revision
            .store(snapshot.revision(), Ordering::Relaxed);
        self.stats.updated_unix.store(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            Ordering::Relaxed,
        );
        *current = snapshot;
        Ok(())
    }

    fn on_update(&self, update: Update) {
        match update {
            Update::Snapshot(s) => {
                let _ = self.apply(s);
            }
            Update::Malformed(bad) => {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(pool = %self.stats.pool, %bad, "skipping a malformed server in etcd");
            }
            Update::Lost { .. } => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// Reads every pool's servers from etcd, swaps them in, and spawns one task per pool that follows etcd
/// until `stop`. Returns each pool's counters, in pool order. Must run inside a tokio runtime.
///
/// # Errors
/// [`MembershipStartError`] for the first pool that cannot start (nothing keeps running then).
pub async fn start(
    pools: &[Arc<Pool>],
    settings: &EtcdMembership,
    stop: CancellationToken,
) -> Result<Vec<Arc<MembershipStats>>, MembershipStartError> {
    let mut followers = Vec::with_capacity(pools.len());
    for pool in pools {
        let config = pool.current.load().config.clone();
        let name = config.name.clone();
        let stats = Arc::new(MembershipStats::new(&name));
        // The file's servers as a snapshot: an equal set in etcd then changes nothing.
        let from_file = config
            .servers
            .iter()
            .map(Member::from_twemproxy)
            .collect::<Result<Vec<_>, _>>()
            .and_then(|m| MembershipSnapshot::new(0, m))
            .map_err(|e| MembershipStartError::Refused {
                pool: name.clone(),
                reason: e.to_string(),
            })?;
        let following = Arc::new(Following {
            pool: Arc::clone(pool),
            stats: Arc::clone(&stats),
            current: Mutex::new(from_file),
            allow_empty: settings.allow_empty,
        });
        let source = settings.source(&name);
        match source.read().await {
            Ok(read) => {
                for bad in read.malformed {
                    following.on_update(Update::Malformed(bad));
                }
                if read.snapshot.is_empty() && !settings.allow_empty {
                    if !settings.fallback {
                        return Err(MembershipStartError::Empty {
                            pool: name,
                            prefix: source.keys().servers_prefix().to_string(),
                        });
                    }
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(pool = %name, "etcd has no servers for the pool; starting from the file's servers");
                } else {
                    following.apply(read.snapshot).map_err(|reason| {
                        MembershipStartError::Refused {
                            pool: name.clone(),
                            reason,
                        }
                    })?;
                }
            }
            Err(e) if settings.fallback => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(pool = %name, error = %e, "etcd unreachable; starting from the file's servers and retrying");
            }
            Err(source) => {
                return Err(MembershipStartError::Unreachable { pool: name, source });
            }
        }
        followers.push((following, source));
    }
    let mut out = Vec::with_capacity(followers.len());
    for (following, source) in followers {
        out.push(Arc::clone(&following.stats));
        let stop = stop.clone();
        tokio::spawn(async move {
            source.watch(|u| following.on_update(u), stop).await;
        });
    }
    Ok(out)
}

/// `config` (re-read on SIGHUP) with each pool's servers replaced by the ones in use, so that a reload
/// changes the file's settings but leaves the servers to etcd.
pub fn keep_servers(pools: &[Arc<Pool>], mut config: ProxyConfig) -> ProxyConfig {
    for new in &mut config.pools {
        if let Some(pool) = pools
            .iter()
            .find(|p| p.current.load().config.name == new.name)
        {
            new.servers = pool.current.load().config.servers.clone();
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_render_as_json_fields_and_prometheus_lines() {
        let s = Arc::new(MembershipStats::new("alpha"));
        s.revision.store(42, Ordering::Relaxed);
        s.errors.store(2, Ordering::Relaxed);
        s.malformed.store(1, Ordering::Relaxed);
        let json = s.json_fields();
        assert_eq!(json[0], ("membership_revision", 42.into()));
        assert_eq!(json[2], ("membership_errors", 2.into()));
        let text = MembershipStats::prometheus(&[Arc::clone(&s)]);
        assert!(text.contains("shardring_proxy_pool_membership_revision{pool=\"alpha\"} 42\n"));
        assert!(text.contains("# TYPE shardring_proxy_pool_membership_errors_total counter\n"));
        assert!(
            text.contains("shardring_proxy_pool_membership_malformed_total{pool=\"alpha\"} 1\n")
        );
    }
}
