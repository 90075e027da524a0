//! A served pool: one `pools:` entry of the config at run time. [`Pool`] is a pool of one protocol,
//! its current [`PoolVersion`] swapped whole on reload; [`ServedPool`] is what [`crate::Proxy`] needs of
//! a pool of any protocol; [`build_pool`] is the one place where a pool picks its protocol. The settings a
//! pool is built from are [`PoolConfig`] (`crates/shardring-config/src/pool.rs`).

pub(crate) mod current;
pub(crate) mod version;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::config::PoolConfig;
use crate::error::ProxyError;
use crate::metrics::PoolView;
use crate::net::Listener;
use crate::protocol::memcache::Memcache;
use crate::protocol::redis::Redis;
use crate::protocol::Protocol;
use crate::tls::PoolTls;

pub(crate) use self::current::Pool;

/// A pool of any protocol, as the proxy runs it: what [`crate::Proxy`] needs of each pool without
/// knowing its protocol.
pub trait ServedPool: Send + Sync + std::fmt::Debug {
    /// The pool's current config.
    fn config(&self) -> PoolConfig;
    /// Swaps in `config`; requests already routed finish on the old state. The TLS files are read
    /// only when its TLS settings changed (a membership change, a failover).
    ///
    /// # Errors
    /// [`ProxyError::Placement`], [`ProxyError::Config`]; the old state is kept.
    fn reload(&self, config: PoolConfig) -> Result<(), ProxyError>;
    /// Swaps in `config` with `tls`, read from its files by the caller (a file reload: renewed
    /// certificates under the same paths are taken).
    ///
    /// # Errors
    /// [`ProxyError::Placement`]; the old state is kept.
    fn reload_with_tls(&self, config: PoolConfig, tls: PoolTls) -> Result<(), ProxyError>;
    /// Reads the pool's config, hands it to `change`, and swaps in what it returns (`None`: nothing
    /// to change), with no other reload in between: what a follower that changes part of the config
    /// (its servers, its slot map) must use, so that it never undoes another's change. Whether a
    /// config was swapped in.
    ///
    /// # Errors
    /// As [`ServedPool::reload`]; the old state is kept.
    fn update(
        &self,
        change: &mut dyn FnMut(PoolConfig) -> Option<PoolConfig>,
    ) -> Result<bool, ProxyError>;
    /// The TLS the pool runs with, as last read from its files.
    fn tls(&self) -> PoolTls;
    /// The tallies for rendering.
    fn view(&self) -> PoolView;
    /// The server (index in the config's server list) that owns `key` now; `None` when none is live.
    fn server_for(&self, key: &[u8]) -> Option<usize>;
    /// How many servers the pool has, live or not.
    fn server_count(&self) -> usize;
    /// Whether the previous ring of the last warm-up window is still in memory.
    fn previous_ring_alive(&self) -> bool;
    /// The pool's fence (`fence`): its registration task confirms it, its sessions read it.
    fn fence(&self) -> Arc<crate::Fence>;
    /// What the pool's requests tell a cluster pool's slot-map follower (`crate::cluster`).
    fn cluster_signal(&self) -> Arc<crate::cluster::ClusterSignal>;
    /// Clients accepted so far by each worker, by worker index: how the shared listener spreads them
    /// ([`crate::workers`]).
    fn clients_per_worker(&self) -> Vec<u64>;
    /// Serves clients from `listener` on worker `worker` (the future must run on that worker's runtime:
    /// its clients' requests take that worker's server connections), taking a client when `admission`
    /// (the pool's `client_connections` and spread, shared by its workers) says so, until `stop`, then
    /// drains them.
    fn serve(
        self: Arc<Self>,
        listener: Listener,
        worker: usize,
        admission: Arc<Admission>,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()>;
    /// Runs the health checks until `stop`.
    fn health(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, ()>;
}

impl<P: Protocol> ServedPool for Pool<P> {
    fn config(&self) -> PoolConfig {
        self.current.load().config.clone()
    }

    fn reload(&self, config: PoolConfig) -> Result<(), ProxyError> {
        let _one = self.shared.reloading.lock();
        Pool::reload(self, config, None)
    }

    fn reload_with_tls(&self, config: PoolConfig, tls: PoolTls) -> Result<(), ProxyError> {
        let _one = self.shared.reloading.lock();
        Pool::reload(self, config, Some(tls))
    }

    fn update(
        &self,
        change: &mut dyn FnMut(PoolConfig) -> Option<PoolConfig>,
    ) -> Result<bool, ProxyError> {
        let _one = self.shared.reloading.lock();
        match change(self.config()) {
            Some(config) => Pool::reload(self, config, None).map(|()| true),
            None => Ok(false),
        }
    }

    fn tls(&self) -> PoolTls {
        self.current.load().tls.clone()
    }

    fn view(&self) -> PoolView {
        Pool::view(self)
    }

    fn server_for(&self, key: &[u8]) -> Option<usize> {
        self.current.load().router.load().server_for(key)
    }

    fn server_count(&self) -> usize {
        self.current.load().backends.len()
    }

    fn previous_ring_alive(&self) -> bool {
        Pool::previous_ring_alive(self)
    }

    fn fence(&self) -> Arc<crate::Fence> {
        Arc::clone(&self.shared.fence)
    }

    fn cluster_signal(&self) -> Arc<crate::cluster::ClusterSignal> {
        Arc::clone(&self.shared.cluster)
    }

    fn clients_per_worker(&self) -> Vec<u64> {
        self.shared.accepted.iter().map(|n| n.get()).collect()
    }

    fn serve(
        self: Arc<Self>,
        listener: Listener,
        worker: usize,
        admission: Arc<Admission>,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        Box::pin(crate::server::run(
            listener,
            self,
            worker,
            admission,
            stop.cancelled_owned(),
        ))
    }

    fn health(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let hot = Arc::clone(&self).run_hot_keys(stop.clone());
            futures_util::future::join(self.run_health(stop), hot).await;
        })
    }
}

/// Builds a pool speaking the protocol its config names, its servers' connections on `workers` (each
/// worker's runtime). This is where a pool picks its protocol.
///
/// # Errors
/// [`ProxyError::Placement`] when the placement cannot be built.
pub(crate) fn build_pool(
    config: PoolConfig,
    workers: &[Handle],
) -> Result<Arc<dyn ServedPool>, ProxyError> {
    if config.is_redis() {
        return Ok(Arc::new(Pool::<Redis>::new(config, workers.to_vec())?));
    }
    Ok(Arc::new(Pool::<Memcache>::new(config, workers.to_vec())?))
}
