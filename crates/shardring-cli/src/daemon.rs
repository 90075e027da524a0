//! nutcracker's `-d` (run as a daemon) and `-p FILE` (the pid file), for init scripts that start it
//! with `start-stop-daemon --pidfile`.
//!
//! `-d` detaches before any thread or runtime exists (a fork keeps only the calling thread): the
//! process forks, the parent exits 0, the child starts a new session, changes to `/` and points
//! stdin, stdout and stderr at `/dev/null` (daemon(3)), so only `-o FILE` keeps its log. Everything a
//! user can get wrong (the configuration, the flags, the log file's path) is checked before, on the
//! terminal. The pid file is written after, so it holds the daemon's pid, and removed when the
//! proxy exits.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Where Debian's nutcracker writes its pid when it daemonizes (`-d`) without `-p`.
const DEFAULT_PID_FILE: &str = "/run/nutcracker/nutcracker.pid";

/// nutcracker's `-d` and `-p`.
#[derive(Debug, clap::Args)]
pub struct DaemonFlags {
    /// Run as a daemon: detach from the terminal, work in /, stdin, stdout and stderr to /dev/null
    /// (log with -o FILE). The configuration and flags are checked first, on the terminal.
    #[arg(long, short = 'd')]
    pub daemonize: bool,
    /// Write the proxy's pid to FILE (after -d detaches) and remove it on exit. With -d and no -p:
    /// /run/nutcracker/nutcracker.pid when /run/nutcracker exists, as Debian's nutcracker does.
    #[arg(long, short = 'p', value_name = "FILE")]
    pid_file: Option<PathBuf>,
}

impl DaemonFlags {
    /// The pid file to write, made absolute before [`detach`] moves the process to `/`: `-p`'s, else
    /// with `-d` Debian's nutcracker's when its directory exists (its init script makes the
    /// directory, then reads the file with `start-stop-daemon --pidfile`), else none.
    ///
    /// # Errors
    /// When `-p`'s path cannot be made absolute.
    pub fn pid_path(&self) -> Result<Option<PathBuf>> {
        match &self.pid_file {
            Some(path) => absolute(path).map(Some),
            None if self.daemonize
                && Path::new(DEFAULT_PID_FILE)
                    .parent()
                    .is_some_and(Path::is_dir) =>
            {
                Ok(Some(DEFAULT_PID_FILE.into()))
            }
            None => Ok(None),
        }
    }
}

/// Detaches from the terminal (daemon(3)): the caller goes on in the child; the parent has exited.
///
/// # Errors
/// When the fork or the new session fails.
pub fn detach() -> Result<()> {
    nix::unistd::daemon(false, false).context("cannot run as a daemon (-d)")
}

/// `path` made absolute against the current directory: a daemon runs in `/`, so a relative `-c`,
/// `-p` or `-o` would mean something else after [`detach`].
pub fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// The pid file: written with this process's pid when made, removed when dropped.
#[derive(Debug)]
pub struct PidFile(PathBuf);

impl PidFile {
    /// Writes `path` with this process's pid and a newline, as nutcracker does.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn create(path: &Path) -> Result<PidFile> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("cannot write the pid file {}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
