//! Pools whose servers come from etcd (`shardring proxy --etcd URL`): each pool keeps its listen address
//! and settings from the YAML file and takes its servers from `<prefix><pool>/servers/` (the layout of
//! [`shardring_etcd::layout`]).
//!
//! A change in etcd is applied exactly as a SIGHUP reload applies a new file: [`ServedPool::reload`] with the
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
//! Each pool's [`MembershipStats`] (revision, last update time, errors, malformed values) are the pool's
//! own tallies: the stats JSON shows them as `membership_*` fields and `/metrics` as
//! `shardring_proxy_pool_membership_*`.
//!
//! `shardring proxy`'s etcd flags are in `flags` ([`crate::flags::MembershipFlags`]).

pub(crate) mod flags;
mod sets;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardring::membership::{Member, MembershipSnapshot};
use shardring_etcd::{take_part, EtcdError, EtcdSource, Kind, Kinds, Registration, Update};
use tokio_util::sync::CancellationToken;

use crate::config::{ClusterConfig, NextMembership, ProxyConfig};
use crate::metrics::PoolStats;
use crate::pool::ServedPool;

pub use self::flags::parse_prefix;

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
            .with_next(true)
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

/// One pool's membership counters: the pool's own tallies ([`PoolStats`]'s `membership_*`), which the
/// stats JSON and `/metrics` render, read through named methods.
#[derive(Debug)]
pub struct MembershipStats {
    /// The pool's tallies.
    counters: Arc<PoolStats>,
}

impl MembershipStats {
    fn new(counters: Arc<PoolStats>) -> MembershipStats {
        MembershipStats { counters }
    }

    /// The pool.
    pub fn pool(&self) -> &str {
        &self.counters.name
    }

    /// The etcd revision of the servers in use.
    pub fn revision(&self) -> u64 {
        self.counters.membership_revision.get()
    }

    /// When the servers were last swapped (Unix seconds; 0 when never).
    pub fn updated_unix(&self) -> u64 {
        self.counters.membership_updated.get()
    }

    /// Refused snapshots, failed swaps and lost connections so far.
    pub fn errors(&self) -> u64 {
        self.counters.membership_errors.get()
    }

    /// Malformed server values seen so far.
    pub fn malformed(&self) -> u64 {
        self.counters.membership_malformed.get()
    }

    fn error(&self) {
        self.counters.membership_errors.inc();
    }
}

/// etcd's member sets a pool serves.
struct InUse {
    /// `servers/`.
    current: MembershipSnapshot,
    /// `next/`, if any.
    next: Option<MembershipSnapshot>,
    /// What each is (`kind`, `next-kind`).
    kinds: Kinds,
}

/// One pool following etcd.
struct Following {
    /// The pool whose servers are swapped.
    pool: Arc<dyn ServedPool>,
    /// Its counters.
    stats: Arc<MembershipStats>,
    /// What of etcd's is in use: the servers as a snapshot (the file's at revision 0 until etcd
    /// is read), the next membership (`next/`), if any, and what each is.
    current: Mutex<InUse>,
    /// Whether empty snapshots apply.
    allow_empty: bool,
    /// What this proxy serves, for its registration under `proxies/` (sent to the task that
    /// keeps it).
    serving: tokio::sync::watch::Sender<Registration>,
}

impl Following {
    /// Swaps in `snapshot`'s servers and `next`'s next membership, each of its kind in `kinds`
    /// (in one reload), unless they are older, equal, or refused.
    fn apply(
        &self,
        snapshot: MembershipSnapshot,
        next: Option<MembershipSnapshot>,
        kinds: Kinds,
    ) -> Result<(), String> {
        let Ok(mut in_use) = self.current.lock() else {
            return Err("membership state poisoned".into());
        };
        let name = self.stats.pool();
        if snapshot.revision() < in_use.current.revision() {
            return Ok(());
        }
        let next_same = match (&in_use.next, &next) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_members(b),
            _ => false,
        };
        if in_use.current.same_members(&snapshot) && next_same && in_use.kinds == kinds {
            self.stats
                .counters
                .membership_revision
                .set(snapshot.revision());
            in_use.current = snapshot;
            in_use.next = next;
            self.registered();
            return Ok(());
        }
        if snapshot.is_empty() && !self.allow_empty {
            self.stats.error();
            tracing::error!(pool = %name, revision = snapshot.revision(), "etcd has no servers for the pool; refused, the current servers stay (--allow-empty applies it)");
            return Err("empty".into());
        }
        if next.is_some() && kinds.next == Kind::Unknown {
            self.stats.error();
            tracing::error!(pool = %name, revision = snapshot.revision(), "etcd's `next-kind` key says a kind this proxy cannot place: no dual write is made to the next membership, and it is not reported (a migration onto it waits)");
        }
        // Read, changed and swapped in with no other reload in between (a cluster's slot-map
        // follower changes the same config): what changed, or why etcd's sets were refused.
        let mut outcome = Err(String::new());
        let swapped = self.pool.update(&mut |before| {
            let built = sets::with_sets(&before, &snapshot, next.as_ref(), kinds);
            outcome = built
                .as_ref()
                .map(|config| crate::config::PoolChanges::between(&before, config).to_string())
                .map_err(Clone::clone);
            built.ok()
        });
        let changes = match swapped.map_err(|e| e.to_string()).and(outcome) {
            Ok(changes) => changes,
            Err(e) => {
                self.stats.error();
                tracing::error!(pool = %name, error = %e, "servers from etcd refused; the current servers stay");
                return Err(e);
            }
        };
        let config = self.pool.config();
        if sets::unmapped_cluster(&config) {
            // A cluster new to the pool: its slot map is read now, not on the follower's schedule.
            self.pool.cluster_signal().stale();
        }
        tracing::info!(pool = %name, revision = snapshot.revision(), servers = snapshot.members().len(), next = next.as_ref().map(|n| n.members().len()), kind = %kinds.current, next_kind = %kinds.next, %changes, "servers from etcd swapped in");
        let counters = &self.stats.counters;
        counters.membership_revision.set(snapshot.revision());
        counters.membership_updated.set(crate::metrics::unix_time());
        *in_use = InUse {
            current: snapshot,
            next,
            kinds,
        };
        self.registered();
        Ok(())
    }

    /// What a renewal of the registration at `renewed` confirms
    /// ([`shardring_etcd::take_part::confirmation`]): during a planned change, only once etcd's pool
    /// is read and applied here.
    async fn confirmation(
        &self,
        source: &EtcdSource,
        renewed: std::time::Instant,
    ) -> Option<std::time::Instant> {
        let planned = self.current.lock().ok().is_some_and(|c| c.next.is_some());
        shardring_etcd::take_part::confirmation(source, renewed, planned, |read| {
            (!read.snapshot.is_empty() || self.allow_empty)
                && self.apply(read.snapshot, read.next, read.kinds).is_ok()
        })
        .await
    }

    /// Hands what the pool serves now to the registration task.
    fn registered(&self) {
        let config = self.pool.config();
        let revision = self.stats.counters.membership_revision.get() as i64;
        let next = config.planned_change().map(|n| n.membership().digest());
        self.serving.send_replace(Registration {
            current: config.membership().digest(),
            next_revision: if next.is_some() { revision } else { 0 },
            next,
            current_revision: revision,
        });
    }

    fn on_update(&self, update: Update) {
        match update {
            Update::Snapshot(s) => {
                let _ = self.apply(s, None, Kinds::default());
            }
            Update::Planned {
                current,
                next,
                kinds,
            } => {
                let _ = self.apply(current, next, kinds);
            }
            Update::Malformed(bad) => {
                self.stats.counters.membership_malformed.inc();
                tracing::warn!(pool = %self.stats.pool(), %bad, "skipping a malformed server in etcd");
            }
            Update::Lost { .. } => {
                self.stats.error();
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
    pools: &[Arc<dyn ServedPool>],
    settings: &EtcdMembership,
    stop: CancellationToken,
) -> Result<Vec<Arc<MembershipStats>>, MembershipStartError> {
    let mut followers = Vec::with_capacity(pools.len());
    for pool in pools {
        let config = pool.config();
        let name = config.name.clone();
        let stats = Arc::new(MembershipStats::new(pool.view().pool));
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
        let (serving, _) = tokio::sync::watch::channel(Registration {
            current: config.membership().digest(),
            next: config.planned_change().map(|n| n.membership().digest()),
            current_revision: 0,
            next_revision: 0,
        });
        let following = Arc::new(Following {
            pool: Arc::clone(pool),
            stats: Arc::clone(&stats),
            current: Mutex::new(InUse {
                current: from_file,
                next: None,
                kinds: Kinds {
                    current: if config.cluster().is_some() {
                        Kind::RedisCluster
                    } else {
                        Kind::Ring
                    },
                    next: Kind::Ring,
                },
            }),
            allow_empty: settings.allow_empty,
            serving,
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
                    stats.error();
                    tracing::warn!(pool = %name, "etcd has no servers for the pool; starting from the file's servers");
                } else {
                    following
                        .apply(read.snapshot, read.next, read.kinds)
                        .map_err(|reason| MembershipStartError::Refused {
                            pool: name.clone(),
                            reason,
                        })?;
                }
            }
            Err(e) if settings.fallback => {
                stats.error();
                tracing::warn!(pool = %name, error = %shardring_etcd::error_chain(&e), "etcd unreachable; starting from the file's servers and retrying");
            }
            Err(source) => {
                return Err(MembershipStartError::Unreachable { pool: name, source });
            }
        }
        // Registered before the pool serves, then read again: a change published meanwhile is
        // seen here, and one published later waits for this proxy (`take_part`).
        let id = proxy_id(&following.pool.config());
        let value = following.serving.borrow().clone();
        let registered = take_part::register_before_serving(seat(&source, &id), &value).await;
        if registered.is_some() {
            if let Ok(read) = source.read().await {
                if !read.snapshot.is_empty() || settings.allow_empty {
                    let _ = following.apply(read.snapshot, read.next, read.kinds);
                }
            }
        }
        followers.push((following, source, id, registered));
    }
    let mut out = Vec::with_capacity(followers.len());
    for (following, source, id, registered) in followers {
        out.push(Arc::clone(&following.stats));
        let stop = stop.clone();
        tokio::spawn(register(
            source.clone(),
            id,
            Arc::clone(&following),
            stop.clone(),
            registered,
        ));
        if following.pool.config().is_redis() {
            // Only a redis pool has a cluster whose maps change it.
            tokio::spawn(reregister_on_maps(Arc::clone(&following), stop.clone()));
        }
        tokio::spawn(async move {
            source.watch(|u| following.on_update(u), stop).await;
        });
    }
    Ok(out)
}

/// `config` (re-read on SIGHUP) with each pool's servers and next membership replaced by the ones
/// in use, and whether it is a Redis Cluster, so that a reload changes the file's settings but
/// leaves the servers to etcd.
pub fn keep_servers(pools: &[Arc<dyn ServedPool>], mut config: ProxyConfig) -> ProxyConfig {
    for new in &mut config.pools {
        if let Some(current) = pools
            .iter()
            .map(|p| p.config())
            .find(|c| c.name == new.name)
        {
            new.servers = current.servers.clone();
            // Whether the pool is a cluster is etcd's too (its `kind` key); the file's cluster
            // settings (how often, where reads go) stay.
            if let (Some(file), Some(now)) = (new.redis_mut(), current.redis()) {
                file.cluster = match (file.cluster.take(), &now.cluster) {
                    (_, None) => None,
                    (Some(set), Some(now)) => Some(ClusterConfig {
                        seeds: now.seeds.clone(),
                        slots: now.slots.clone(),
                        ..set
                    }),
                    (None, Some(now)) => Some(now.clone()),
                };
            }
            new.next = current.next.map(|n| NextMembership {
                servers: n.servers,
                cluster: n.cluster,
                ..NextMembership::of(new)
            });
        }
    }
    config
}

/// This proxy's name among the pool's registrations and in its roster: host and the pool's listen
/// address (`/` replaced, which etcd keys of the layout may not hold). Not the process: a proxy
/// restarted after a crash answers for the entry its predecessor left in the roster, so that a
/// migration waiting for it goes on, rather than waiting for a process that is gone for good.
fn proxy_id(config: &crate::config::PoolConfig) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}-{}", config.listen).replace(['/', ' '], "_")
}

/// Keeps this proxy registered under the pool's `proxies/` and `roster/` with what it serves, until
/// `stop`, confirming the pool's fence after each renewal (`shardring_etcd::take_part`).
async fn register(
    source: EtcdSource,
    id: String,
    following: Arc<Following>,
    stop: CancellationToken,
    registered: Option<shardring_etcd::admin::RegistrationHandle>,
) {
    let fence = following.pool.fence();
    take_part::take_part(
        seat(&source, &id),
        following.serving.subscribe(),
        &fence,
        |renewed| following.confirmation(&source, renewed),
        stop,
        registered,
    )
    .await;
}

/// Hands what the pool serves to its registration again whenever a cluster's slot map changed
/// the pool, until `stop`: a next membership that is a cluster is served (and reported) only once
/// its map is read, which no etcd update announces (the next renewal's confirmation, up to 2.5 s
/// later, would report it too; this reports it at once).
async fn reregister_on_maps(following: Arc<Following>, stop: CancellationToken) {
    let mut maps = following.pool.cluster_signal().maps_applied();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = maps.changed() => {
                if changed.is_err() {
                    return;
                }
                following.registered();
            }
        }
    }
}

/// This proxy's seat in the pool's roster, under the default lease.
fn seat<'a>(source: &'a EtcdSource, id: &'a str) -> take_part::Seat<'a> {
    take_part::Seat {
        source,
        id,
        ttl: shardring_etcd::admin::DEFAULT_REGISTRATION_TTL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_the_pools_own_tallies() {
        let counters = Arc::new(PoolStats::new("alpha"));
        let s = MembershipStats::new(Arc::clone(&counters));
        counters.membership_revision.set(42);
        s.error();
        s.error();
        assert_eq!((s.pool(), s.revision(), s.errors()), ("alpha", 42, 2));
        let text = crate::metrics::render_prometheus(
            std::time::Instant::now(),
            &[crate::metrics::PoolView {
                placements: Default::default(),
                pool: counters,
                servers: Vec::new(),
            }],
        );
        assert!(
            text.contains("shardring_proxy_pool_membership_revision{pool=\"alpha\"} 42\n"),
            "{text}"
        );
        assert!(
            text.contains("shardring_proxy_pool_membership_errors_total{pool=\"alpha\"} 2\n"),
            "{text}"
        );
    }
}
