//! The operator's signals, as nutcracker's init scripts, units and logrotate send them (SIGINT and
//! SIGTERM, which drain, are [`crate::shutdown`]'s):
//!
//! | signal | what it does |
//! | --- | --- |
//! | SIGHUP | reopens the log file (logrotate's `postrotate`), then reloads the configuration |
//! | SIGTTIN | one log level more verbose (error → warn → info → debug → trace) |
//! | SIGTTOU | one log level less verbose |
//! | SIGUSR1, SIGUSR2 | nothing but a log line (nutcracker ignores them too; by default they kill) |
//!
//! Every one is logged when it arrives. The handlers are installed before anything else, so none of
//! these signals can stop the process (SIGTTIN's and SIGTTOU's default) or kill it (SIGUSR1's and
//! SIGUSR2's) once [`crate::run`] has begun. The log itself is the caller's ([`LogControl`]): the
//! proxy library never installs a subscriber.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::Level;

use crate::config::{ConfigErrors, PoolChanges, ProxyConfig};
use crate::error::ProxyError;
use crate::Proxy;

/// What the operator's signals do to the process's log: implemented by whoever installed the
/// subscriber (the `shardring` command).
pub trait LogControl: Send + Sync + fmt::Debug {
    /// The level in effect for the whole process.
    fn level(&self) -> Level;
    /// Makes `level` the level for the whole process (SIGTTIN, SIGTTOU).
    fn set_level(&self, level: Level);
    /// Reopens the log file at its path (SIGHUP), so that a file moved away by logrotate is
    /// replaced by a new one. Nothing to do when the log goes to stderr.
    ///
    /// # Errors
    /// When the file cannot be opened; the log goes on to the old one.
    fn reopen(&self) -> io::Result<()>;
}

/// The levels from the least to the most verbose.
const LEVELS: [Level; 5] = [
    Level::ERROR,
    Level::WARN,
    Level::INFO,
    Level::DEBUG,
    Level::TRACE,
];

/// The level one step more verbose (`up`) or less verbose than `level`, the same at either end.
pub fn step(level: Level, up: bool) -> Level {
    let i = LEVELS.iter().position(|l| *l == level).unwrap_or(2);
    let j = if up {
        (i + 1).min(LEVELS.len() - 1)
    } else {
        i.saturating_sub(1)
    };
    LEVELS[j]
}

/// The signal handlers, installed at once so that none of the signals keeps its default action.
#[derive(Debug)]
pub(crate) struct OperatorSignals {
    hangup: Signal,
    ttin: Signal,
    ttou: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl OperatorSignals {
    /// Installs the handlers. Must run inside a tokio runtime.
    pub(crate) fn install() -> io::Result<OperatorSignals> {
        Ok(OperatorSignals {
            hangup: signal(SignalKind::hangup())?,
            ttin: signal(SignalKind::from_raw(libc::SIGTTIN))?,
            ttou: signal(SignalKind::from_raw(libc::SIGTTOU))?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// Acts on every signal until `stop` completes: reloads `proxy` with the config `load` returns on
    /// SIGHUP (a refused config is logged with every problem, and the running one stays), after
    /// reopening `log`'s file, and moves `log`'s level on SIGTTIN and SIGTTOU.
    pub(crate) async fn serve<L>(
        mut self,
        proxy: Arc<Proxy>,
        mut load: L,
        log: Option<Arc<dyn LogControl>>,
        stop: impl Future<Output = ()>,
    ) where
        L: FnMut() -> Result<ProxyConfig, ConfigErrors>,
    {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                Some(()) = self.hangup.recv() => {
                    tracing::info!(signal = "SIGHUP", "reopening the log file and reloading the configuration");
                    if let Some(log) = &log {
                        if let Err(e) = log.reopen() {
                            tracing::error!(error = %e, "cannot reopen the log file; logging on to the old one");
                        }
                    }
                    reload(&proxy, &mut load);
                }
                Some(()) = self.ttin.recv() => change_level(log.as_deref(), "SIGTTIN", true),
                Some(()) = self.ttou.recv() => change_level(log.as_deref(), "SIGTTOU", false),
                Some(()) = self.usr1.recv() => {
                    tracing::info!(signal = "SIGUSR1", "ignored (as nutcracker does)");
                }
                Some(()) = self.usr2.recv() => {
                    tracing::info!(signal = "SIGUSR2", "ignored (as nutcracker does)");
                }
                else => return,
            }
        }
    }
}

/// Reloads `proxy` with `load`'s config and logs what changed in each pool.
fn reload<L>(proxy: &Proxy, load: &mut L)
where
    L: FnMut() -> Result<ProxyConfig, ConfigErrors>,
{
    let before: Vec<_> = proxy.pools().iter().map(|p| p.config()).collect();
    match load()
        .map_err(ProxyError::from)
        .and_then(|c| proxy.reload(c.clone()).map(|()| c))
    {
        Ok(config) => {
            for (old, new) in before.iter().zip(&config.pools) {
                let changes = PoolChanges::between(old, new);
                tracing::info!(pool = %new.name, %changes, "configuration reloaded");
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "reload refused; the running configuration stays");
        }
    }
}

/// Moves the log level one step and says so, at a level that shows both before and after the
/// change: a raise is logged once it is in effect, a lowering before.
fn change_level(log: Option<&dyn LogControl>, signal: &'static str, up: bool) {
    let Some(log) = log else {
        tracing::warn!(
            signal,
            "no log level to change: the log is not the command's"
        );
        return;
    };
    let from = log.level();
    let to = step(from, up);
    if from == to {
        let end = if up { "most" } else { "least" };
        tracing::warn!(
            signal,
            level = from.as_str(),
            "log level unchanged: already the {end} verbose"
        );
        return;
    }
    if up {
        log.set_level(to);
    }
    let shown = if up { to } else { from };
    let level = to;
    let (from, to) = (
        from.as_str().to_ascii_lowercase(),
        to.as_str().to_ascii_lowercase(),
    );
    let (from, to) = (from.as_str(), to.as_str());
    match shown {
        Level::ERROR => tracing::error!(signal, from, to, "log level changed"),
        Level::WARN => tracing::warn!(signal, from, to, "log level changed"),
        Level::INFO => tracing::info!(signal, from, to, "log level changed"),
        Level::DEBUG => tracing::debug!(signal, from, to, "log level changed"),
        Level::TRACE => tracing::trace!(signal, from, to, "log level changed"),
    }
    if !up {
        log.set_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_step_and_stop_at_either_end() {
        assert_eq!(step(Level::INFO, true), Level::DEBUG);
        assert_eq!(step(Level::INFO, false), Level::WARN);
        assert_eq!(step(Level::TRACE, true), Level::TRACE);
        assert_eq!(step(Level::ERROR, false), Level::ERROR);
    }
}
