//! # shardring-proxy
//!
//! A memcached sharding proxy that reads twemproxy's (nutcracker's) pools and places keys with shardring.
//!
//! Why use it instead of twemproxy:
//! - more of the protocol: gat/gats, touch, the meta commands (mg/ms/md/ma/me/mn, flags passed through),
//!   flush_all, verbosity, stats, 250-byte keys; unknown or malformed commands get `ERROR` or
//!   `CLIENT_ERROR` and the connection goes on wherever the protocol allows;
//! - a multi-get returns the keys it could fetch when one server is down (twemproxy's all-or-nothing is an
//!   option);
//! - an active health check: dead servers are ejected without client traffic and rejoin only once they
//!   answer;
//! - reload on SIGHUP, a bad new config refused and the running one kept;
//! - twemproxy's stats JSON plus Prometheus metrics with per-server latency histograms;
//! - multi-threaded (tokio).
//!
//! ## Layout
//! - [`protocol::memcache`]: the pure request parser and reply framer (the fuzz target);
//! - [`router`]: key → server over a pool's live servers;
//! - [`backend`]: each server's pipelined connection pool and its health;
//! - [`cluster`]: a pool at run time, swapped whole on reload;
//! - [`server`]: the accept loop and the per-client task;
//! - [`metrics`], [`shutdown`], [`reload`].
//!
//! ## Example
//! ```no_run
//! use shardring_proxy::{config::PoolConfig, config::ProxyConfig, Proxy};
//!
//! # async fn demo() -> Result<(), shardring_proxy::ProxyError> {
//! let pool = PoolConfig::new("alpha", "127.0.0.1:22121", &["127.0.0.1:11211:1", "127.0.0.1:11212:1"])?;
//! let proxy = Proxy::new(ProxyConfig { pools: vec![pool] })?;
//! let listeners = proxy.bind().await?;
//! proxy.serve(listeners, async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(())
//! # }
//! ```

pub mod backend;
pub mod cluster;
pub mod config;
mod error;
pub mod metrics;
pub mod net;
pub mod protocol;
pub mod reload;
pub mod router;
mod server;
mod session;
pub mod shutdown;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

pub use crate::config::{ConfigErrors, PoolConfig, ProxyConfig};
pub use crate::error::{BackendError, ProxyError};

use crate::cluster::{build_pool, ServedPool};
use crate::metrics::PoolView;
use crate::net::Listener;

/// The proxy's version, as stats and `version` replies show it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The proxy: every pool of a config, each with its servers and health task.
#[derive(Debug)]
pub struct Proxy {
    /// The pools, in config order (reload matches them by position and name).
    pools: Vec<Arc<dyn ServedPool>>,
    /// When the proxy started, for uptime in stats.
    started: Instant,
}

impl Proxy {
    /// Validates `config` (every problem at once) and builds its pools. Must run inside a tokio runtime:
    /// server connection tasks are spawned (they connect on first use unless `preconnect`).
    ///
    /// # Errors
    /// [`ProxyError::Config`] with every problem.
    pub fn new(config: ProxyConfig) -> Result<Proxy, ProxyError> {
        config.validate()?;
        let pools = config
            .pools
            .into_iter()
            .map(build_pool)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Proxy {
            pools,
            started: Instant::now(),
        })
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
            out.push(net::bind(&c.listen, c.backlog).await?);
        }
        Ok(out)
    }

    /// Serves every pool on its listener (in pool order) and runs the health checks, until `shutdown`
    /// completes; then drains every client's in-flight requests and returns.
    pub async fn serve(&self, listeners: Vec<Listener>, shutdown: impl Future<Output = ()>) {
        let stop = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        for (pool, listener) in self.pools.iter().zip(listeners) {
            tasks.spawn(Arc::clone(pool).serve(listener, stop.clone()));
            tasks.spawn(Arc::clone(pool).health(stop.clone()));
        }
        shutdown.await;
        stop.cancel();
        while tasks.join_next().await.is_some() {}
    }

    /// Every pool's tallies, for the stats renderers.
    pub fn views(&self) -> Vec<PoolView> {
        self.pools.iter().map(|p| p.view()).collect()
    }

    /// When the proxy started.
    pub fn started(&self) -> Instant {
        self.started
    }
}
