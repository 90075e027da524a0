//! The proxy as a process runs it: the composition root. [`run`] raises the descriptor limit
//! ([`crate::descriptors`]), starts the workers ([`crate::workers`]), binds every pool and the stats
//! listeners, acts on the operator's signals ([`crate::signals`]: SIGHUP reopens the log and reloads,
//! SIGTTIN/SIGTTOU move the log level, SIGUSR1/SIGUSR2 are harmless), and on SIGINT/SIGTERM stops
//! accepting and drains in-flight requests (at most [`RunOptions::drain_limit`]); a second signal ends
//! it at once.
//!
//! The CLI (`shardring proxy`) only parses flags and calls [`run`], as mini-redis's `bin/server.rs` does.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{ConfigErrors, ProxyConfig};
use crate::descriptors::{self, DescriptorLimit, DescriptorNeed};
use crate::error::{BindTarget, ProxyError};
use crate::signals::{LogControl, OperatorSignals};
use crate::workers::Workers;
use crate::{metrics, shutdown, Proxy};

/// How the process around the pools is set up.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where twemproxy's stats JSON is served (`host:port`). By default, `127.0.0.1:22222` (stats are
    /// not for the world).
    pub stats_addr: String,
    /// Where Prometheus text is served at `/metrics`, if anywhere. By default, nowhere.
    pub metrics_addr: Option<String>,
    /// How long in-flight requests get to finish after SIGINT/SIGTERM. By default, 30 s.
    pub drain_limit: Duration,
    /// How many workers serve clients ([`crate::workers`]). One (the default) serves them on the
    /// thread that runs [`run`], beside the control plane; more start that many threads, each with
    /// its own server connections, and leave the control plane on the calling thread.
    pub workers: usize,
    /// Take every pool's servers from etcd instead of the file (a reload then changes the file's other
    /// settings only). By default, none: the file's servers.
    #[cfg(feature = "etcd")]
    pub membership: Option<crate::membership::EtcdMembership>,
    /// The process's log, for the signals that reopen it and move its level
    /// ([`crate::signals`]). By default, none: those signals are logged and change nothing.
    pub log: Option<Arc<dyn LogControl>>,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            stats_addr: "127.0.0.1:22222".into(),
            metrics_addr: None,
            drain_limit: Duration::from_secs(30),
            workers: 1,
            #[cfg(feature = "etcd")]
            membership: None,
            log: None,
        }
    }
}

/// Runs `config`'s pools until SIGINT or SIGTERM, reloading with `load`'s config on every SIGHUP.
/// Must run inside a tokio runtime: a current-thread one, where the control plane runs (and the one
/// worker, when [`RunOptions::workers`] is 1).
///
/// First it raises the process's soft descriptor limit to the hard one, and warns, with the
/// numbers, when the limit is below what the configuration may hold open
/// ([`crate::descriptors::needed`]).
///
/// # Errors
/// A refused config, an address that cannot be bound, worker threads or signal handlers that cannot
/// be started.
pub async fn run<L>(config: ProxyConfig, options: RunOptions, mut load: L) -> Result<(), ProxyError>
where
    L: FnMut() -> Result<ProxyConfig, ConfigErrors> + Send + 'static,
{
    // First, so that from here on no operator's signal stops or kills the process.
    let operator_signals = OperatorSignals::install()?;
    let limit = raise_descriptor_limit();
    let workers = if options.workers <= 1 {
        Workers::current()
    } else {
        Workers::start(options.workers).map_err(|source| ProxyError::Workers {
            workers: options.workers,
            source,
        })?
    };
    let proxy = Arc::new(Proxy::on_workers(config, workers)?);
    if let Some(limit) = limit {
        let pools: Vec<_> = proxy.pools().iter().map(|p| p.config()).collect();
        let stats_listeners = 1 + usize::from(options.metrics_addr.is_some());
        warn_if_short(
            limit,
            descriptors::needed(&pools, proxy.workers(), stats_listeners),
        );
    }
    let listeners = proxy.bind().await?;
    let stop = CancellationToken::new();
    #[cfg(feature = "etcd")]
    let follows_etcd = match &options.membership {
        Some(settings) => {
            crate::membership::start(proxy.pools(), settings, stop.clone())
                .await
                .map_err(|e| ProxyError::Membership(Box::new(e)))?;
            true
        }
        None => false,
    };
    #[cfg(not(feature = "etcd"))]
    let follows_etcd = false;
    // Redis pools with `--sentinel`: their masters resolved before the first client is served.
    let sentinels = crate::sentinel::follow::start(proxy.pools(), stop.clone()).await;
    // Cluster pools: their slot maps read before the first client is served.
    let clusters = crate::cluster::follow::start(proxy.pools(), stop.clone()).await;
    let pools = Arc::clone(&proxy);
    let load = move || {
        // The masters stay the Sentinels': a reload changes the file's other settings.
        let config = clusters.keep_maps(sentinels.keep_masters(load()?));
        #[cfg(feature = "etcd")]
        if follows_etcd {
            // The servers stay etcd's: a reload changes the file's other settings.
            return Ok(crate::membership::keep_servers(pools.pools(), config));
        }
        let _ = (&pools, follows_etcd);
        Ok(config)
    };
    let bind_err = |addr: &str, what: BindTarget| {
        let addr = addr.to_owned();
        move |source| ProxyError::Bind { addr, what, source }
    };
    let stats = tokio::net::TcpListener::bind(&options.stats_addr)
        .await
        .map_err(bind_err(&options.stats_addr, BindTarget::Stats))?;
    let metrics_listener = match &options.metrics_addr {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(bind_err(addr, BindTarget::Metrics))?,
        ),
        None => None,
    };
    for (pool, l) in proxy.pools().iter().zip(&listeners) {
        tracing::info!(pool = %pool.config().name, listen = %l.local_addr().unwrap_or_default(), "serving");
    }
    tracing::info!(stats = %options.stats_addr, metrics = ?options.metrics_addr, workers = proxy.workers(), "stats");

    let p = Arc::clone(&proxy);
    tokio::spawn(metrics::serve_json(
        stats,
        proxy.started(),
        move || p.views(),
        stop.clone(),
    ));
    if let Some(l) = metrics_listener {
        let p = Arc::clone(&proxy);
        tokio::spawn(metrics::serve_prometheus(
            l,
            proxy.started(),
            move || p.views(),
            stop.clone(),
        ));
    }
    tokio::spawn(operator_signals.serve(
        Arc::clone(&proxy),
        load,
        options.log.clone(),
        stop.clone().cancelled_owned(),
    ));

    let (drain, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = proxy.serve(listeners, async {
        let _ = drain_rx.await;
    });
    tokio::pin!(serving);
    tokio::select! {
        served = &mut serving => served?,
        signal = shutdown::signal_received() => {
            tracing::info!(signal = signal?, "shutting down: draining in-flight requests");
        }
    }
    let _ = drain.send(());
    tokio::select! {
        served = serving => served?,
        () = tokio::time::sleep(options.drain_limit) => tracing::warn!("drain limit reached; exiting"),
        second = shutdown::signal_received() => {
            tracing::warn!(signal = ?second.ok(), "second signal; exiting now");
        }
    }
    stop.cancel();
    Ok(())
}

/// Raises the soft descriptor limit to the hard one and logs what it did; `None` (logged) when the
/// limit cannot be read or set, which leaves the proxy running with what it has.
fn raise_descriptor_limit() -> Option<DescriptorLimit> {
    match descriptors::raise_limit() {
        Ok(limit) => {
            if limit.soft != limit.before {
                tracing::info!(
                    from = limit.before,
                    to = limit.soft,
                    hard = limit.hard,
                    "descriptor limit raised"
                );
            }
            Some(limit)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the descriptor limit");
            None
        }
    }
}

/// Warns when `limit` is below `need`: past it, accepts and connects fail for want of descriptors
/// (counted as `descriptor_shortages`, never against a server).
fn warn_if_short(limit: DescriptorLimit, need: DescriptorNeed) {
    if limit.soft >= need.total() {
        return;
    }
    tracing::warn!(
        limit = limit.soft,
        hard = limit.hard,
        needed = need.total(),
        clients = need.clients,
        server_connections = need.servers,
        listeners = need.listeners,
        margin = need.margin,
        "the descriptor limit is below what the configuration may open: past it, new clients wait \
         and requests needing a new server connection fail with a server error (raise the hard \
         limit: ulimit -Hn, systemd's LimitNOFILE=; or lower client_connections)"
    );
}
