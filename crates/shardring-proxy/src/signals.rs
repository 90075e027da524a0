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
//!
//! ## Reloads under a burst of signals, and files still being written
//!
//! A reload takes the configuration only once it has *settled*: after a SIGHUP the files are read
//! at once and then every [`READ_EVERY`], and the configuration is taken when every read over
//! [`SETTLE`] (the first of them after the signal) gave the same result. A tool that rewrites the
//! file in place (truncate, then write it in pieces) and signals halfway is not reloaded from the
//! half it wrote, even when that half parses (a server list cut short): the reads differ until the
//! last piece is written, and the whole file is taken [`SETTLE`] later. A half file that does not
//! parse is no different: a refusal is logged only once it has settled too.
//!
//! Signals are coalesced, never dropped: a SIGHUP that arrives while a reload settles starts the
//! settling again from a read after it, so the reload that ends the burst takes the files as they
//! are after the last signal (two SIGHUPs a few milliseconds apart, the file changed between them,
//! end with the second file served).
//!
//! And for [`FOLLOW`] after a SIGHUP, and after every change seen since, the files are read again
//! every [`FOLLOW_EVERY`] without a signal: a write that paused for longer than [`SETTLE`] (and was
//! taken half done) is reloaded once it ends and settles, so the proxy ends serving the file as it
//! is when the writes end. Past that, only a SIGHUP reloads.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;
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
    /// SIGHUP, once it has settled ([`Reloads`]; a refused config is logged with every problem, and
    /// the running one stays), after reopening `log`'s file, and moves `log`'s level on SIGTTIN and
    /// SIGTTOU.
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
        let mut reloads = Reloads::default();
        loop {
            let next_read = reloads.next_read();
            tokio::select! {
                () = &mut stop => return,
                Some(()) = self.hangup.recv() => {
                    tracing::info!(signal = "SIGHUP", "reopening the log file and reloading the configuration");
                    if let Some(log) = &log {
                        if let Err(e) = log.reopen() {
                            tracing::error!(error = %e, "cannot reopen the log file; logging on to the old one");
                        }
                    }
                    reloads.signal(Instant::now());
                    read(&mut reloads, &proxy, &mut load);
                }
                () = tokio::time::sleep_until(next_read.unwrap_or_else(Instant::now)), if next_read.is_some() => {
                    read(&mut reloads, &proxy, &mut load);
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

/// How long the configuration must read the same before a reload takes it: longer than the pauses
/// between the pieces of one write (an editor's or a config-management tool's writes follow each
/// other within microseconds to milliseconds), short beside how long an operator waits for a reload.
pub const SETTLE: Duration = Duration::from_millis(100);

/// How often the files are read while a reload settles.
pub const READ_EVERY: Duration = Duration::from_millis(20);

/// How long after a SIGHUP, and after every change seen since, the files are still read without a
/// signal, to follow a write that paused past [`SETTLE`] to its end.
pub const FOLLOW: Duration = Duration::from_secs(2);

/// How often the files are read while they are followed.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(100);

/// What one read of the files gave: the config, or every problem it has.
type Loaded = Result<ProxyConfig, ConfigErrors>;

/// The reloads SIGHUP asks for, and when they take the files: the module's settle rule (see
/// [the module](self)), as a state machine the signal loop feeds with reads.
#[derive(Debug, Default)]
struct Reloads {
    /// A SIGHUP not yet answered by a reload. Set by every signal, cleared only when a settled read
    /// is taken: several signals before that make one reload, and none is dropped.
    requested: bool,
    /// The latest read, and the run of identical reads it ends.
    latest: Option<Run>,
    /// What the last reload took (applied, or refused with its problems): a change from it seen
    /// while following is reloaded.
    taken: Option<Loaded>,
    /// Until when the files are read without a signal.
    follow_until: Option<Instant>,
}

/// Identical reads in a row.
#[derive(Debug)]
struct Run {
    loaded: Loaded,
    /// When the first of them had been read: the files were as they read from then on.
    since: Instant,
    /// When the latest of them began: the files were still as they read then.
    latest_began: Instant,
    /// When the latest of them had been read: the next read is due from this.
    latest_ended: Instant,
}

impl Reloads {
    /// A SIGHUP at `now`: a reload is due, taken from reads made after it.
    fn signal(&mut self, now: Instant) {
        self.requested = true;
        self.latest = None;
        self.follow_until = Some(now + FOLLOW);
    }

    /// Whether the latest read is still to be taken: a signal asked for a reload, or it differs
    /// from what the last reload took.
    fn settling(&self) -> bool {
        self.requested
            || self
                .latest
                .as_ref()
                .is_some_and(|run| self.taken.as_ref() != Some(&run.loaded))
    }

    /// When the files are to be read next; `None` when nothing is settling or followed.
    fn next_read(&self) -> Option<Instant> {
        let Some(run) = &self.latest else {
            // Only before the first read after a signal, which the signal's branch makes at once.
            return self.requested.then(Instant::now);
        };
        if self.settling() {
            return Some(run.latest_ended + READ_EVERY);
        }
        let until = self.follow_until?;
        (run.latest_ended < until).then_some(run.latest_ended + FOLLOW_EVERY)
    }

    /// A read that began at `began`, ended at `ended` and gave `loaded`: the config to reload with
    /// (or the problems to refuse it for) when it has settled, else `None`.
    fn record(&mut self, began: Instant, ended: Instant, loaded: Loaded) -> Option<Loaded> {
        match &mut self.latest {
            Some(run) if run.loaded == loaded => {
                run.latest_began = began;
                run.latest_ended = ended;
            }
            latest => {
                let was_taken = latest.as_ref().map(|run| &run.loaded) == self.taken.as_ref();
                if latest.is_some() {
                    // A write under way: follow it to its end.
                    self.follow_until = Some(ended + FOLLOW);
                    if was_taken && !self.requested {
                        tracing::info!(
                            "the configuration files changed after the last reload (a write was \
                             still under way): reloading them once they have settled"
                        );
                    } else {
                        tracing::debug!("the configuration files changed while a reload settled");
                    }
                }
                *latest = Some(Run {
                    loaded,
                    since: ended,
                    latest_began: began,
                    latest_ended: ended,
                });
            }
        }
        let run = self.latest.as_ref()?;
        if !self.settling() || run.latest_began < run.since + SETTLE {
            return None;
        }
        self.requested = false;
        self.taken = Some(run.loaded.clone());
        Some(run.loaded.clone())
    }
}

/// Reads the files with `load` and reloads `proxy` when the reads have settled.
fn read<L>(reloads: &mut Reloads, proxy: &Proxy, load: &mut L)
where
    L: FnMut() -> Result<ProxyConfig, ConfigErrors>,
{
    let began = Instant::now();
    let loaded = load();
    if let Some(loaded) = reloads.record(began, Instant::now(), loaded) {
        reload(proxy, loaded);
    }
}

/// Reloads `proxy` with `loaded`'s config and logs what changed in each pool.
fn reload(proxy: &Proxy, loaded: Loaded) {
    let before: Vec<_> = proxy.pools().iter().map(|p| p.config()).collect();
    match loaded
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

    /// A config of one pool with `servers` servers (a file cut short has fewer).
    fn servers(n: u16) -> Loaded {
        let servers: Vec<String> = (0..n)
            .map(|i| format!("127.0.0.1:{}:1", 11211 + i))
            .collect();
        let servers: Vec<&str> = servers.iter().map(String::as_str).collect();
        Ok(ProxyConfig {
            pools: vec![
                crate::config::PoolConfig::new("alpha", "127.0.0.1:22121", &servers).unwrap(),
            ],
        })
    }

    fn broken() -> Loaded {
        let mut errors = ConfigErrors::default();
        errors.push("alpha", "cut short".into());
        Err(errors)
    }

    /// Feeds `reloads` a read of `loaded` at `at` ms after `t0` (taking no time); what it takes.
    fn read_at(reloads: &mut Reloads, t0: Instant, at: u64, loaded: Loaded) -> Option<Loaded> {
        let t = t0 + Duration::from_millis(at);
        reloads.record(t, t, loaded)
    }

    #[test]
    fn a_reload_takes_the_file_once_it_has_read_the_same_for_the_settle_time() {
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        reloads.signal(t0);
        assert!(
            reloads.next_read().is_some(),
            "the first read is due at once"
        );
        assert_eq!(read_at(&mut reloads, t0, 0, servers(3)), None);
        assert_eq!(reloads.next_read(), Some(t0 + READ_EVERY));
        assert_eq!(read_at(&mut reloads, t0, 20, servers(3)), None);
        assert_eq!(read_at(&mut reloads, t0, 99, servers(3)), None);
        assert_eq!(read_at(&mut reloads, t0, 100, servers(3)), Some(servers(3)));
        // Then followed, without taking the same file again.
        assert_eq!(
            reloads.next_read(),
            Some(t0 + Duration::from_millis(100) + FOLLOW_EVERY)
        );
        assert_eq!(read_at(&mut reloads, t0, 200, servers(3)), None);
        // Until FOLLOW after the signal.
        let end = FOLLOW.as_millis() as u64;
        assert_eq!(read_at(&mut reloads, t0, end, servers(3)), None);
        assert_eq!(reloads.next_read(), None);
    }

    #[test]
    fn a_file_written_in_pieces_is_taken_whole() {
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        reloads.signal(t0);
        // Truncated, then a server at a time, each piece within the settle time of the last.
        assert_eq!(read_at(&mut reloads, t0, 0, broken()), None);
        for (n, at) in (1..=4).zip((20..).step_by(60)) {
            assert_eq!(read_at(&mut reloads, t0, at, servers(n)), None, "{n}");
        }
        assert_eq!(read_at(&mut reloads, t0, 250, servers(4)), None);
        assert_eq!(read_at(&mut reloads, t0, 300, servers(4)), Some(servers(4)));
    }

    #[test]
    fn a_signal_while_a_reload_settles_is_not_lost() {
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        reloads.signal(t0);
        assert_eq!(read_at(&mut reloads, t0, 0, servers(2)), None);
        // The file changed again, and a second signal 5 ms after the first.
        reloads.signal(t0 + Duration::from_millis(5));
        assert_eq!(read_at(&mut reloads, t0, 5, servers(1)), None);
        assert_eq!(read_at(&mut reloads, t0, 100, servers(1)), None);
        assert_eq!(read_at(&mut reloads, t0, 105, servers(1)), Some(servers(1)));
        // A signal with the file as it was taken reloads it again (certificates renewed in place,
        // a Sentinel's new master), once it has settled.
        let t1 = t0 + Duration::from_secs(5);
        reloads.signal(t1);
        assert_eq!(read_at(&mut reloads, t1, 0, servers(1)), None);
        assert_eq!(read_at(&mut reloads, t1, 100, servers(1)), Some(servers(1)));
    }

    #[test]
    fn a_write_that_paused_past_the_settle_time_is_followed_to_its_end() {
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        reloads.signal(t0);
        // Half the file, then a pause longer than the settle time: the half is taken.
        assert_eq!(read_at(&mut reloads, t0, 0, servers(2)), None);
        assert_eq!(read_at(&mut reloads, t0, 100, servers(2)), Some(servers(2)));
        // The write goes on after the pause, without a signal: the whole file is taken once it
        // settles.
        assert_eq!(read_at(&mut reloads, t0, 1_900, servers(3)), None);
        assert_eq!(read_at(&mut reloads, t0, 1_920, servers(4)), None);
        assert!(reloads.next_read().is_some());
        assert_eq!(
            read_at(&mut reloads, t0, 2_020, servers(4)),
            Some(servers(4))
        );
        // Followed for FOLLOW after the last change seen.
        let last_change = Duration::from_millis(1_920);
        assert_eq!(
            read_at(
                &mut reloads,
                t0,
                (last_change + FOLLOW).as_millis() as u64,
                servers(4)
            ),
            None
        );
        assert_eq!(reloads.next_read(), None);
    }

    #[test]
    fn a_broken_file_is_refused_once_it_has_settled_and_a_fix_is_followed() {
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        reloads.signal(t0);
        assert_eq!(read_at(&mut reloads, t0, 0, broken()), None);
        assert_eq!(read_at(&mut reloads, t0, 100, broken()), Some(broken()));
        assert_eq!(read_at(&mut reloads, t0, 200, servers(2)), None);
        assert_eq!(read_at(&mut reloads, t0, 300, servers(2)), Some(servers(2)));
    }

    #[test]
    fn levels_step_and_stop_at_either_end() {
        assert_eq!(step(Level::INFO, true), Level::DEBUG);
        assert_eq!(step(Level::INFO, false), Level::WARN);
        assert_eq!(step(Level::TRACE, true), Level::TRACE);
        assert_eq!(step(Level::ERROR, false), Level::ERROR);
    }
}
