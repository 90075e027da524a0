//! Reload: SIGHUP re-reads the config and swaps each pool's servers and placement atomically.
//!
//! A new config is validated whole before anything changes: if it has any problem, every problem is
//! logged and the running config stays. Client connections stay open; requests already sent to a server
//! finish there; servers whose address and settings are unchanged keep their connections, tallies and
//! ejection state. What a reload cannot change (pool names and `listen` addresses, which would need new
//! sockets) is refused like any other problem.

use std::future::Future;

use tokio::signal::unix::{signal, SignalKind};

use crate::config::{ConfigErrors, ProxyConfig};
use crate::error::ProxyError;
use crate::Proxy;

impl Proxy {
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
            if new.redis != old.redis {
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
        errors.into_result()?;
        for (new, pool) in config.pools.into_iter().zip(&self.pools) {
            pool.reload(new)?;
        }
        Ok(())
    }

    /// Reloads on every SIGHUP with the config `load` returns, until `stop` completes. Errors are logged.
    ///
    /// # Errors
    /// When the signal handler cannot be installed.
    pub async fn reload_on_sighup<F>(
        &self,
        mut load: F,
        stop: impl Future<Output = ()>,
    ) -> std::io::Result<()>
    where
        F: FnMut() -> Result<ProxyConfig, ConfigErrors>,
    {
        let mut hup = signal(SignalKind::hangup())?;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return Ok(()),
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading the configuration");
                    match load().map_err(ProxyError::from).and_then(|c| self.reload(c)) {
                        Ok(()) => tracing::info!("configuration reloaded"),
                        Err(e) => tracing::error!(error = %e, "reload refused; the running configuration stays"),
                    }
                }
            }
        }
    }
}
