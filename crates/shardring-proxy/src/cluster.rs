//! One pool at run time: its config, its servers' connection pools, its router, and the health task that
//! ejects and rejoins servers. A reload builds a new [`Cluster`] beside the old one and swaps it in.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::health::probe;
use crate::backend::stream::is_unix_path;
use crate::backend::{Backend, BackendSettings, EjectPolicy, ServerHealth};
use crate::config::PoolConfig;
use crate::error::ProxyError;
use crate::metrics::{PoolStats, PoolView, ServerStats};
use crate::protocol::Protocol;
use crate::router::{build_placement, Router};

/// The probe timeout when the pool has no `timeout`.
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A pool's servers and routing for one version of its config.
#[derive(Debug)]
pub(crate) struct Cluster<P: Protocol> {
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
}

impl<P: Protocol> Cluster<P> {
    /// Builds the state for `config`, keeping the servers of `previous` whose address and settings are
    /// unchanged (their connections, tallies and ejection state carry over).
    ///
    /// Must run inside a tokio runtime: new servers' connection tasks are spawned.
    ///
    /// # Errors
    /// [`ProxyError::Placement`] when the placement cannot be built.
    pub(crate) fn build(
        config: PoolConfig,
        previous: Option<&Cluster<P>>,
        shared: &PoolShared,
    ) -> Result<Cluster<P>, ProxyError> {
        let protocol = P::new(&config);
        let handshakes = protocol.handshakes();
        let policy = EjectPolicy {
            auto_eject: config.auto_eject_hosts,
            failure_limit: config.server_failure_limit,
            retry_timeout: config.server_retry_timeout,
        };
        let backends: Vec<Arc<Backend<P>>> = config
            .servers
            .iter()
            .map(|s| {
                let settings = BackendSettings {
                    addr: if is_unix_path(&s.host) {
                        s.host.clone()
                    } else if s.host.contains(':') {
                        format!("[{}]:{}", s.host, s.port)
                    } else {
                        format!("{}:{}", s.host, s.port)
                    },
                    timeout: config.timeout,
                    connections: config.server_connections,
                    max_value_len: config.limits.max_value_len,
                    keepalive: config.tcpkeepalive,
                };
                let reuse = previous.and_then(|p| {
                    p.backends.iter().find(|b| {
                        b.settings() == &settings
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
                            handshakes.clone(),
                        ))
                    }
                }
            })
            .collect();
        let live: Vec<bool> = backends.iter().map(|b| !b.health.is_ejected()).collect();
        let routing =
            build_placement(config.placement_spec(), &live).map_err(|e| ProxyError::Placement {
                pool: config.name.clone(),
                reason: e.to_string(),
            })?;
        Ok(Cluster {
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
        match build_placement(self.config.placement_spec(), &live) {
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
    /// retry time has come rejoin when they do.
    pub(crate) async fn health_round(&self) {
        let timeout = self.config.timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT);
        let request = self.protocol.probe_request();
        let probes = self.backends.iter().map(|b| async move {
            let ejected = b.health.is_ejected();
            if ejected && !b.health.retry_due() {
                return;
            }
            let ok = probe::<P>(&b.settings().addr, request, timeout).await;
            if ejected {
                b.health.rejoin_result(ok, &b.stats);
            } else if ok {
                b.health.record_success();
            } else {
                tracing::debug!(server = %b.stats.name, "health probe failed");
                b.health.record_failure(&b.stats);
            }
        });
        futures_util::future::join_all(probes).await;
    }
}

/// What a pool keeps across reloads: its tallies and the wake-up for its health task.
#[derive(Debug)]
pub(crate) struct PoolShared {
    /// The pool's client-side tallies.
    pub stats: Arc<PoolStats>,
    /// Woken on ejection or rejoin.
    pub changed: Arc<Notify>,
    /// When the pool started, for `stats`' uptime.
    pub started: std::time::Instant,
}

/// A pool: the current [`Cluster`], swapped whole on reload.
#[derive(Debug)]
pub(crate) struct Pool<P: Protocol> {
    /// The current state; each request loads it once.
    pub current: ArcSwap<Cluster<P>>,
    /// What survives reloads.
    pub shared: PoolShared,
}

impl<P: Protocol> Pool<P> {
    /// Builds a pool from `config`. Must run inside a tokio runtime.
    ///
    /// # Errors
    /// [`ProxyError::Placement`] when the placement cannot be built.
    pub(crate) fn new(config: PoolConfig) -> Result<Pool<P>, ProxyError> {
        let shared = PoolShared {
            stats: Arc::new(PoolStats::with_commands(&config.name, P::command_names())),
            changed: Arc::new(Notify::new()),
            started: std::time::Instant::now(),
        };
        let cluster = Cluster::build(config, None, &shared)?;
        Ok(Pool {
            current: ArcSwap::from_pointee(cluster),
            shared,
        })
    }

    /// Swaps in `config`. Requests already routed finish on the old state.
    ///
    /// # Errors
    /// [`ProxyError::Placement`]; the old state is kept.
    pub(crate) fn reload(&self, config: PoolConfig) -> Result<(), ProxyError> {
        let old = self.current.load_full();
        let next = Cluster::build(config, Some(&old), &self.shared)?;
        self.current.store(Arc::new(next));
        Ok(())
    }

    /// The tallies for rendering.
    pub(crate) fn view(&self) -> PoolView {
        let c = self.current.load();
        PoolView {
            pool: Arc::clone(&self.shared.stats),
            servers: c.backends.iter().map(|b| Arc::clone(&b.stats)).collect(),
        }
    }

    /// Runs health checks until `stop`: a probe round every `health_check_interval`, and a placement
    /// rebuild whenever a server is ejected or rejoins.
    pub(crate) async fn run_health(self: Arc<Pool<P>>, stop: CancellationToken) {
        loop {
            let interval = self.current.load().config.health_check_interval;
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.shared.changed.notified() => {}
                () = tokio::time::sleep(interval) => {
                    let cluster = self.current.load_full();
                    cluster.health_round().await;
                }
            }
            self.current.load().refresh_routing();
        }
    }
}
