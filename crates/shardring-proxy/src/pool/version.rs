//! One version of a pool: the servers, protocol and router built from one version of its config, and
//! the health round that ejects and rejoins its servers. A reload builds a new [`PoolVersion`] beside
//! the old one and the [`Pool`](super::Pool) swaps it in.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::backend::health::{probe, ProbeFailure};
use crate::backend::{Backend, BackendSettings, EjectPolicy, ServerHealth};
use crate::config::{NextMembership, PoolConfig, VALUE_LEN_CEILING};
use crate::descriptors::During;
use crate::error::ProxyError;
use crate::hot_keys::HotKeys;
use crate::metrics::{PoolStats, ServerStats};
use crate::protocol::{PoolState, Protocol};
use crate::router::{build_placement, build_routing, Router, Routing};
use crate::tls::PoolTls;
use shardring::compat::twemproxy::TwemproxyServer;

/// The probe timeout when the pool has no `timeout`.
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A pool's servers and routing for one version of its config.
#[derive(Debug)]
pub(crate) struct PoolVersion<P: Protocol> {
    /// The config this state was built from.
    pub config: PoolConfig,
    /// The protocol, with this config's settings.
    pub protocol: P,
    /// The servers, in config order; the router's indices point here.
    pub backends: Vec<Arc<Backend<P>>>,
    /// Key → server index over the servers that are not ejected.
    pub router: Router,
    /// The live set the router was last built with.
    live: Mutex<Vec<bool>>,
    /// The TLS this version's listener hands new clients (`--tls-cert`) and its servers' new
    /// connections use (`--server-tls`), as read from the files ([`super::Pool::reload`] says when
    /// they are read again).
    pub tls: PoolTls,
    /// The previous version of the pool while a warm-up window is open (`--warmup-window`): misses on
    /// a key's new server are retried on its server there. Emptied when the window closes, which
    /// frees the old ring.
    pub previous: arc_swap::ArcSwapOption<PoolVersion<P>>,
    /// For each server of the version this one replaced, its index here (`None`: it left the pool).
    pub previous_now: Vec<Option<usize>>,
    /// While the pool has a next membership that places keys differently: its placement, over
    /// every next server (indices into `backends`; none is ejected from it). Writes of a key whose
    /// owner there differs go to both owners.
    pub next: Option<Arc<Routing>>,
}

impl<P: Protocol> PoolVersion<P> {
    /// Builds the state for `config` with its TLS `tls`, keeping the servers of `previous` whose
    /// address and settings are unchanged (their connections, tallies and ejection state carry over).
    ///
    /// New servers' connection tasks are spawned on every worker's runtime (`shared.workers`).
    ///
    /// # Errors
    /// [`ProxyError::Placement`] when the placement cannot be built.
    pub(crate) fn build(
        config: PoolConfig,
        previous: Option<&PoolVersion<P>>,
        shared: &PoolShared<P>,
        tls: PoolTls,
    ) -> Result<PoolVersion<P>, ProxyError> {
        // Before the servers: its handshakes open their connections. What it places beyond the
        // router (memcached's replica lists and gutter) it builds from the config itself.
        let pool = PoolState {
            hot: shared.hot.as_ref(),
            cluster: config.cluster().map(|_| &shared.cluster),
            next_cluster: config
                .next
                .as_ref()
                .and_then(|n| n.cluster.as_ref())
                .map(|_| &shared.cluster),
        };
        let mut protocol = P::new(&config, &pool)?;
        let handshakes = protocol.handshakes();
        let introductions = protocol.introductions();
        let policy = EjectPolicy {
            auto_eject: config.auto_eject_hosts,
            failure_limit: config.server_failure_limit,
            retry_timeout: config.server_retry_timeout,
            breakers: config.breakers,
        };
        let gutter_servers = config
            .memcache_remedies()
            .gutter
            .as_ref()
            .map_or(&[][..], |g| &g.servers[..]);
        // The next membership's servers that the pool does not have yet go after the gutter's:
        // dual writes reach them, nothing else does (the current routing never names them).
        let next_only: Vec<TwemproxyServer> = config
            .planned_change()
            .map(|next| {
                next.servers
                    .iter()
                    .filter(|n| !config.servers.iter().any(|s| s.same_address(n)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let servers: Vec<&TwemproxyServer> = config
            .servers
            .iter()
            .chain(gutter_servers)
            .chain(&next_only)
            .collect();
        let greeting = Greeting {
            handshakes: &handshakes,
            introductions: &introductions,
            policy,
        };
        let backends = backends(&servers, &config, previous, shared, &tls, &greeting);
        let live: Vec<bool> = backends.iter().map(|b| !b.health.is_ejected()).collect();
        let routing = build_routing(&config, &live).map_err(|e| ProxyError::Placement {
            pool: config.name.clone(),
            reason: e.to_string(),
        })?;
        let previous_now = previous.map_or_else(Vec::new, |p| {
            p.backends
                .iter()
                .map(|old| {
                    backends
                        .iter()
                        .position(|b| b.settings().addr == old.settings().addr)
                })
                .collect()
        });
        let next = match config.planned_change() {
            Some(next) => Some(Arc::new(next_routing(
                next,
                &config,
                gutter_servers.len(),
                backends.len(),
            )?)),
            None => None,
        };
        protocol.attach_facts(backends.iter().map(|b| Arc::clone(b.facts())).collect());
        Ok(PoolVersion {
            next,
            tls,
            previous: arc_swap::ArcSwapOption::empty(),
            previous_now,
            config,
            protocol,
            backends,
            router: Router::new(routing),
            live: Mutex::new(live),
        })
    }

    /// Rebuilds the router when a server was ejected or rejoined since the last build.
    pub(crate) fn refresh_routing(&self) {
        let live: Vec<bool> = self
            .backends
            .iter()
            .map(|b| !b.health.is_ejected())
            .collect();
        let Ok(mut current) = self.live.lock() else {
            return;
        };
        if *current == live {
            return;
        }
        match build_routing(&self.config, &live) {
            Ok(routing) => {
                tracing::info!(
                    pool = %self.config.name,
                    live = routing.live_servers(),
                    total = live.len(),
                    "placement rebuilt"
                );
                self.router.store(routing);
                *current = live;
            }
            Err(e) => {
                tracing::error!(pool = %self.config.name, error = %e, "placement rebuild failed")
            }
        }
    }

    /// Probes every server once: live ones count a failure when they do not answer, ejected ones whose
    /// retry time has come rejoin when they do. A probe the proxy could not open for want of
    /// descriptors proves nothing either way: it is counted and logged as the proxy's shortage, and
    /// the server keeps its state (an ejected one is probed again next round).
    pub(crate) async fn health_round(&self) {
        let timeout = self.config.timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT);
        let request = self.protocol.probe_request();
        let probes = self.backends.iter().map(|b| async move {
            let ejected = b.health.is_ejected();
            if ejected && !b.health.retry_due() {
                return;
            }
            match probe::<P>(
                &b.settings().addr,
                b.settings().tls.as_ref(),
                request,
                timeout,
            )
            .await
            {
                Err(ProbeFailure::Shortage(e)) => crate::descriptors::shortage(
                    Some(b.health.pool_stats()),
                    During::Probe(&b.stats.name),
                    &e,
                ),
                Ok(()) if ejected => b.health.rejoin_result(true, &b.stats),
                Ok(()) => b.health.record_success(&b.stats),
                Err(_) if ejected => b.health.rejoin_result(false, &b.stats),
                Err(failure) => {
                    tracing::debug!(
                        pool = %self.config.name,
                        server = %b.stats.name,
                        cause = %failure,
                        "health probe failed"
                    );
                    b.health.record_failure(&b.stats, &failure);
                }
            }
        });
        futures_util::future::join_all(probes).await;
    }
}

/// The next membership's placement over the pool's servers: each next server is the pool's server
/// of the same address, or one of those appended after the gutter's (in the next file's order, or
/// the next cluster's map's).
fn next_routing(
    next: &NextMembership,
    config: &PoolConfig,
    gutter: usize,
    total: usize,
) -> Result<Routing, ProxyError> {
    let mut appended = config.servers.len() + gutter;
    let to: Vec<usize> = next
        .servers
        .iter()
        .map(
            |n| match config.servers.iter().position(|s| s.same_address(n)) {
                Some(i) => i,
                None => {
                    appended += 1;
                    appended - 1
                }
            },
        )
        .collect();
    if let Some(table) = next.cluster.as_ref().and_then(|c| c.slots.as_deref()) {
        return Ok(Routing::slots(table.renumbered(&to), total));
    }
    let spec = next.placement_spec();
    let routing = build_placement(spec, &vec![true; spec.servers.len()]).map_err(|e| {
        ProxyError::Placement {
            pool: config.name.clone(),
            reason: format!("next membership: {e}"),
        }
    })?;
    Ok(routing.renumbered(&to, total))
}

/// What a pool keeps across reloads: its tallies, the wake-up for its health task, and the workers its
/// servers' connections run on.
#[derive(Debug)]
pub(crate) struct PoolShared<P: Protocol> {
    /// Each worker's runtime, by worker index ([`crate::workers`]): every server has connections on
    /// each, so a client's requests stay on its worker's thread.
    pub workers: Vec<tokio::runtime::Handle>,
    /// Clients accepted by each worker, by worker index: how the shared listener spreads them.
    pub accepted: Vec<crate::metrics::Counter>,
    /// The pool's client-side tallies.
    pub stats: Arc<PoolStats>,
    /// Woken on ejection or rejoin.
    pub changed: Arc<Notify>,
    /// When the pool started, for `stats`' uptime.
    pub started: std::time::Instant,
    /// Hot-key detection and cache, when on (settings read at start).
    pub hot: Option<Arc<HotKeys>>,
    /// The previous ring of the last warm-up window, weakly (to tell when it is freed).
    pub warm_previous: Mutex<std::sync::Weak<PoolVersion<P>>>,
    /// Whether the proxy's place in etcd is confirmed ([`crate::fence`]).
    pub fence: Arc<crate::Fence>,
    /// What a cluster pool's requests tell its slot-map follower (`crate::cluster`); unused by
    /// other pools.
    pub cluster: Arc<crate::cluster::ClusterSignal>,
    /// Held over a read-change-reload ([`ServedPool::update`](crate::pool::ServedPool::update)) and
    /// over every reload, so that two followers (etcd's membership, a cluster's slot map) never
    /// reload a config read before the other's change and undo it.
    pub reloading: Mutex<()>,
}

/// How a version's servers are greeted and ejected: what a running backend must share to be reused.
struct Greeting<'a, P: Protocol> {
    /// The handshakes each new connection sends ([`Dialect::handshakes`](crate::protocol::Dialect::handshakes)).
    handshakes: &'a [Vec<(bytes::Bytes, P::ReplyKind)>],
    /// What a new connection introduces itself with ([`Dialect::introductions`](crate::protocol::Dialect::introductions)).
    introductions: &'a [(bytes::Bytes, P::ReplyKind)],
    /// When a failing server is ejected.
    policy: EjectPolicy,
}

/// A version's backends, in `servers`' order: the previous version's where one has the same
/// settings, greeting, name and policy (its connections stay up), a new one spawned otherwise.
fn backends<P: Protocol>(
    servers: &[&TwemproxyServer],
    config: &PoolConfig,
    previous: Option<&PoolVersion<P>>,
    shared: &PoolShared<P>,
    tls: &PoolTls,
    greeting: &Greeting<'_, P>,
) -> Vec<Arc<Backend<P>>> {
    let (handshakes, introductions, policy) =
        (greeting.handshakes, greeting.introductions, greeting.policy);
    servers
        .iter()
        .map(|s| {
            let settings = BackendSettings {
                addr: s.address(),
                timeout: config.timeout,
                connections: config.server_connections,
                max_value_len: config
                    .memcache()
                    .map_or(VALUE_LEN_CEILING, |m| m.limits.max_value_len),
                keepalive: config.tcpkeepalive,
                own_connections: config.redis().map_or(0, |r| r.dedicated_connections),
                tls: tls.servers.clone(),
            };
            let reuse = previous.and_then(|p| {
                p.backends.iter().find(|b| {
                    b.settings() == &settings
                        && b.greets_with(handshakes)
                        && b.stats.name == s.display_name()
                        && b.health.policy() == policy
                })
            });
            match reuse {
                Some(b) => Arc::clone(b),
                None => {
                    let stats = Arc::new(ServerStats::new(&s.display_name()));
                    let health = Arc::new(ServerHealth::new(
                        policy,
                        Arc::clone(&shared.changed),
                        Arc::clone(&shared.stats),
                    ));
                    Arc::new(Backend::spawn(
                        settings,
                        stats,
                        health,
                        config.preconnect,
                        handshakes.to_vec(),
                        introductions.to_vec(),
                        &shared.workers,
                    ))
                }
            }
        })
        .collect()
}
