//! The proxy: every pool of a config, each with its servers and health task; bound, served, reloaded
//! and drained as one, on its workers ([`crate::workers`]: each accepts and serves its own clients).
//!
//! Reload swaps each pool's servers and placement atomically. A new config is validated whole before
//! anything changes: if it has any problem, every problem is reported and the running config stays.
//! Client connections stay open; requests already sent to a server finish there; servers whose address
//! and settings are unchanged keep their connections, tallies and ejection state. What a reload cannot
//! change (pool names, `listen` addresses, a pool's protocol) is refused like any other problem.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::config::{ConfigErrors, ProxyConfig};
use crate::error::ProxyError;
use crate::metrics::PoolView;
use crate::net::{self, Listener};
use crate::pool::{build_pool, ServedPool};
use crate::workers::Workers;

/// The proxy: every pool of a config, each with its servers and health task.
#[derive(Debug)]
pub struct Proxy {
    /// The pools, in config order (reload matches them by position and name).
    pools: Vec<Arc<dyn ServedPool>>,
    /// When the proxy started, for uptime in stats.
    started: Instant,
    /// The threads serving clients. Last, so the pools go first and the worker threads are stopped
    /// (and their tasks dropped) when the proxy is.
    workers: Workers,
}

impl Proxy {
    /// Validates `config` (every problem at once) and builds its pools, served by one worker: the
    /// calling runtime (must be inside one). Server connection tasks are spawned (they connect on first
    /// use unless `preconnect`).
    ///
    /// # Errors
    /// [`ProxyError::Config`] with every problem.
    pub fn new(config: ProxyConfig) -> Result<Proxy, ProxyError> {
        Proxy::on_workers(config, Workers::current())
    }

    /// Like [`Proxy::new`], served by `workers`: every server gets `server_connections` connections
    /// on each worker, and each worker accepts and serves its own clients.
    ///
    /// # Errors
    /// [`ProxyError::Config`] with every problem.
    pub fn on_workers(config: ProxyConfig, workers: Workers) -> Result<Proxy, ProxyError> {
        config.validate()?;
        let pools = config
            .pools
            .into_iter()
            .map(|c| build_pool(c, workers.handles()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Proxy {
            pools,
            started: Instant::now(),
            workers,
        })
    }

    /// How many workers serve clients.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// The pools.
    pub fn pools(&self) -> &[Arc<dyn ServedPool>] {
        &self.pools
    }

    /// Binds every pool's `listen` address, in pool order.
    ///
    /// # Errors
    /// [`ProxyError::Bind`] for the first address that cannot be bound.
    pub async fn bind(&self) -> Result<Vec<Listener>, ProxyError> {
        let mut out = Vec::with_capacity(self.pools.len());
        for p in &self.pools {
            let c = p.config();
            out.push(net::bind(&c.listen, c.backlog, &c.name).await?);
        }
        Ok(out)
    }

    /// Serves every pool on its listener (in pool order) from every worker, and runs the health checks
    /// here, until `shutdown` completes; then every worker drains its clients' in-flight requests, and
    /// this returns once all have.
    ///
    /// # Errors
    /// [`ProxyError::Bind`] when a listener cannot be shared with the workers (nothing is served).
    pub async fn serve(
        &self,
        listeners: Vec<Listener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ProxyError> {
        let handles = self.workers.handles();
        let mut per_worker = Vec::with_capacity(listeners.len());
        for (pool, listener) in self.pools.iter().zip(listeners) {
            let shared = listener
                .for_workers(handles)
                .map_err(|source| ProxyError::Bind {
                    addr: pool.config().listen.to_string(),
                    what: crate::error::BindTarget::Pool(pool.config().name),
                    source,
                })?;
            per_worker.push(shared);
        }
        let stop = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        for (pool, listeners) in self.pools.iter().zip(per_worker) {
            let admission = Arc::new(Admission::new(handles.len(), pool.config().client_cap()));
            for (worker, (listener, handle)) in listeners.into_iter().zip(handles).enumerate() {
                let serving =
                    Arc::clone(pool).serve(listener, worker, Arc::clone(&admission), stop.clone());
                // The accept loop and its clients run on the worker; this waits for its drain.
                let on_worker = handle.spawn(serving);
                tasks.spawn(async move {
                    let _ = on_worker.await;
                });
            }
            tasks.spawn(Arc::clone(pool).health(stop.clone()));
        }
        shutdown.await;
        stop.cancel();
        while tasks.join_next().await.is_some() {}
        Ok(())
    }

    /// Clients accepted so far by each worker, for each pool (in pool order): how the shared listener
    /// spreads them.
    pub fn clients_per_worker(&self) -> Vec<Vec<u64>> {
        self.pools.iter().map(|p| p.clients_per_worker()).collect()
    }

    /// Every pool's tallies, for the stats renderers.
    pub fn views(&self) -> Vec<PoolView> {
        self.pools.iter().map(|p| p.view()).collect()
    }

    /// When the proxy started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Swaps in `config` for every pool, or changes nothing.
    ///
    /// # Errors
    /// [`ProxyError::Config`] listing every problem; the running config is kept.
    pub fn reload(&self, config: ProxyConfig) -> Result<(), ProxyError> {
        config.validate()?;
        let mut errors = ConfigErrors::default();
        if config.pools.len() != self.pools.len() {
            errors.push(
                "",
                "a reload cannot add or remove pools; restart for that".into(),
            );
        }
        for (new, pool) in config.pools.iter().zip(&self.pools) {
            let old = pool.config();
            if new.name != old.name {
                errors.push(
                    &new.name,
                    format!("a reload cannot rename pool {}", old.name),
                );
            }
            if new.is_redis() != old.is_redis() {
                errors.push(
                    &new.name,
                    "a reload cannot change a pool's protocol (redis); restart for that".into(),
                );
            }
            if new.listen != old.listen {
                errors.push(
                    &new.name,
                    "a reload cannot change listen; restart for that".into(),
                );
            }
        }
        // Every pool's TLS files, read once, before any pool changes: one that cannot be used keeps
        // them all.
        let mut tls = Vec::with_capacity(config.pools.len());
        for new in &config.pools {
            match crate::tls::PoolTls::of(new) {
                Ok(t) => tls.push(t),
                Err(e) => errors.problems.extend(e.problems),
            }
        }
        errors.into_result()?;
        for ((new, pool), tls) in config.pools.into_iter().zip(&self.pools).zip(tls) {
            pool.reload_with_tls(new, tls)?;
        }
        Ok(())
    }
}
