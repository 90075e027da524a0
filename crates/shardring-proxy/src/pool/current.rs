//! One served pool of one protocol: its current [`PoolVersion`], swapped whole on reload, and what
//! survives reloads ([`PoolShared`]). The session and the accept loop take a pool from here, and
//! `pool/mod.rs` (which starts the accept loops) wraps it as a [`super::ServedPool`], so the accept loop
//! and this file do not import each other.

use crate::config::{NextMembership, PoolConfig};
use crate::error::ProxyError;
use crate::hot_keys::{HotKeys, TickState};
use crate::metrics::Placements;
use crate::metrics::{HotKeyRow, HotKeysReport, PoolStats, PoolView};
use crate::protocol::Protocol;
use crate::tls::PoolTls;
use arc_swap::ArcSwap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::version::{PoolShared, PoolVersion};

/// A pool: the current [`PoolVersion`], swapped whole on reload.
#[derive(Debug)]
pub(crate) struct Pool<P: Protocol> {
    /// The current state; each request loads it once.
    pub current: ArcSwap<PoolVersion<P>>,
    /// What survives reloads.
    pub shared: PoolShared<P>,
}

impl<P: Protocol> Pool<P> {
    /// Builds a pool from `config` whose servers' connections run on `workers` (each worker's runtime,
    /// by worker index; at least one).
    ///
    /// # Errors
    /// [`ProxyError::Placement`] when the placement cannot be built.
    pub(crate) fn new(
        config: PoolConfig,
        workers: Vec<tokio::runtime::Handle>,
    ) -> Result<Pool<P>, ProxyError> {
        let stats = Arc::new(PoolStats::with_commands(&config.name, P::command_names()));
        let shared = PoolShared {
            accepted: workers.iter().map(|_| Default::default()).collect(),
            workers,
            hot: config
                .hot_keys()
                .map(|h| Arc::new(HotKeys::new(h, Arc::clone(&stats)))),
            cluster: Arc::new(crate::cluster::ClusterSignal::new(Arc::clone(&stats))),
            stats,
            changed: Arc::new(Notify::new()),
            started: std::time::Instant::now(),
            warm_previous: Mutex::new(std::sync::Weak::new()),
            fence: Arc::default(),
            reloading: Mutex::new(()),
        };
        let tls = crate::tls::PoolTls::of(&config)?;
        let version = PoolVersion::build(config, None, &shared, tls)?;
        Ok(Pool {
            current: ArcSwap::from_pointee(version),
            shared,
        })
    }

    /// Swaps in `config`, with `tls` read from its files, or, when `None`, the running version's TLS
    /// if its TLS settings are unchanged (a membership change or a Sentinel's failover reads no
    /// file, so a certificate being rewritten cannot hold it up). Requests already routed finish on
    /// the old state.
    ///
    /// # Errors
    /// [`ProxyError::Placement`], or [`ProxyError::Config`] for TLS files that cannot be used; the
    /// old state is kept.
    pub(crate) fn reload(
        &self,
        config: PoolConfig,
        tls: Option<PoolTls>,
    ) -> Result<(), ProxyError> {
        let old = self.current.load_full();
        let tls = match tls {
            Some(tls) => tls,
            None if old.config.tls == config.tls && old.config.server_tls == config.server_tls => {
                old.tls.clone()
            }
            None => crate::tls::PoolTls::of(&config)?,
        };
        let window = config.memcache_remedies().warmup_window;
        let ring_changed = old.config.servers != config.servers
            || old.config.hash != config.hash
            || old.config.hash_tag != config.hash_tag
            || old.config.distribution != config.distribution;
        let next = Arc::new(PoolVersion::build(config, Some(&old), &self.shared, tls)?);
        match window {
            Some(window) if ring_changed => self.open_warmup(&old, &next, window),
            // An unchanged ring keeps the open window, if any, on the new version.
            _ => next.previous.store(old.previous.load_full()),
        }
        self.current.store(next);
        if let Some(cache) = self.shared.hot.as_ref().and_then(|h| h.cache()) {
            cache.clear();
        }
        Ok(())
    }

    /// Keeps `old` as `next`'s previous ring for `window`, then drops it.
    fn open_warmup(&self, old: &Arc<PoolVersion<P>>, next: &Arc<PoolVersion<P>>, window: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // One previous ring at a time: the old one's own previous (an earlier window) goes now.
        old.previous.store(None);
        next.previous.store(Some(Arc::clone(old)));
        if let Ok(mut w) = self.shared.warm_previous.lock() {
            *w = Arc::downgrade(old);
        }
        self.shared.stats.warmup_open.set(1);
        let next = Arc::downgrade(next);
        let stats = Arc::clone(&self.shared.stats);
        runtime.spawn(async move {
            tokio::time::sleep(window).await;
            if let Some(next) = next.upgrade() {
                next.previous.store(None);
            }
            stats.warmup_open.set(0);
        });
    }

    /// Whether the previous ring of the last warm-up window is still in memory (tests check that a
    /// closed window frees it).
    pub(crate) fn previous_ring_alive(&self) -> bool {
        self.shared
            .warm_previous
            .lock()
            .map(|w| w.strong_count() > 0)
            .unwrap_or(false)
    }

    /// The tallies for rendering.
    pub(crate) fn view(&self) -> PoolView {
        let c = self.current.load();
        PoolView {
            pool: Arc::clone(&self.shared.stats),
            servers: c.backends.iter().map(|b| Arc::clone(&b.stats)).collect(),
            placements: {
                // A next membership is reported once keys can be placed by it (a cluster's once
                // its map is read): `migrate` copies only once every proxy dual-writes.
                let current = c.config.membership();
                let next = c
                    .config
                    .planned_change()
                    .map_or(current, NextMembership::membership);
                Placements {
                    current: current.digest(),
                    next: next.digest(),
                    current_text: current.canonical_text(),
                    next_text: next.canonical_text(),
                    split: c
                        .config
                        .remedies
                        .split
                        .as_ref()
                        .map_or_else(String::new, crate::config::SplitConfig::digest),
                }
            },
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
                    let version = self.current.load_full();
                    version.health_round().await;
                }
            }
            self.current.load().refresh_routing();
        }
    }

    /// Runs the hot-key ticker until `stop` (returns at once when detection is off): the coarse clock,
    /// the re-ranking, the window's slide, and the ranking published to the stats with each key's
    /// server.
    pub(crate) async fn run_hot_keys(self: Arc<Pool<P>>, stop: CancellationToken) {
        let Some(hot) = self.shared.hot.clone() else {
            return;
        };
        let mut ticks = tokio::time::interval(hot.tick_period());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut state = TickState::default();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            if hot.tick(&mut state) {
                let set = hot.current();
                let version = self.current.load();
                let routing = version.router.load();
                let rows = set
                    .top
                    .iter()
                    .map(|r| HotKeyRow {
                        key: String::from_utf8_lossy(&r.key).into_owned(),
                        count: u64::from(r.count),
                        server: routing
                            .server_for(&r.key)
                            .map(|i| version.backends[i].stats.name.clone()),
                    })
                    .collect();
                self.shared
                    .stats
                    .hot_keys
                    .store(Some(Arc::new(HotKeysReport {
                        window_ms: u64::try_from(hot.window().as_millis()).unwrap_or(u64::MAX),
                        keys: rows,
                    })));
            }
        }
    }
}
