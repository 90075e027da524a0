//! The proxy's log: where it goes (stderr, or the file of `-o`), in which form (`--log-format text` or
//! `json`, one object a line), and which lines it keeps (`--log-level`, nutcracker's `-v N`, and
//! `RUST_LOG`'s directives on top). It is the proxy library's [`LogControl`]: SIGHUP reopens the file
//! at its path (after logrotate moved it away), SIGTTIN and SIGTTOU move the level one step.
//!
//! The file is written with `O_APPEND`, one `write` per line, so lines from the worker threads never
//! interleave; a reopen swaps the file under the writers without a lock on the logging path.
//!
//! Installing the log also installs the handlers that write a last line when a fatal signal
//! (SIGSEGV, SIGABRT, …) kills the process ([`crate::fatal`]); a reopen points them at the new file.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

/// The log's flags: nutcracker's `-o` and `-v`, and ours.
#[derive(Debug, clap::Args)]
pub struct LogFlags {
    /// Log to FILE (appended; SIGHUP reopens it, for logrotate) instead of stderr.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// nutcracker's log level, 0 to 11 (5, notice, its default): 0-3 mean error, 4 warn, 5-6 info,
    /// 7 debug, 8-11 trace.
    #[arg(long, short = 'v', value_name = "N", conflicts_with = "log_level",
          value_parser = clap::value_parser!(u8).range(0..=11))]
    verbose: Option<u8>,
    /// The log level: error, warn, info, debug or trace. RUST_LOG's directives (RUST_LOG=
    /// shardring_proxy=debug) apply on top; SIGTTIN and SIGTTOU move it one step. [default: info]
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<Level>,
    /// The log's form: text, or json (one object a line).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl LogFlags {
    /// The level asked for: `--log-level`, else `-v N` as nutcracker's, else info.
    pub fn level(&self) -> Level {
        match (self.log_level, self.verbose) {
            (Some(level), _) => level,
            (None, Some(n)) => nutcracker_level(n),
            (None, None) => Level::INFO,
        }
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text an event: time, level, target, message, fields.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields` (with `message`).
    Json,
}

/// nutcracker's `-v N` (0 = emergencies only … 5 = notice, its default … 11 = everything) as ours.
fn nutcracker_level(n: u8) -> Level {
    match n {
        0..=3 => Level::ERROR,
        4 => Level::WARN,
        5 | 6 => Level::INFO,
        7 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// Where the lines go.
#[derive(Debug)]
enum Output {
    Stderr,
    /// `-o FILE`: the path, to reopen, and the file open now.
    File {
        path: PathBuf,
        file: ArcSwap<File>,
    },
}

/// The installed log, for the signals that reopen it and move its level.
#[derive(Debug)]
pub struct Log {
    output: Arc<Output>,
    /// Changes the filter in place (tracing rebuilds its callsites' interest on each change).
    filter: reload::Handle<EnvFilter, Registry>,
    /// The level that `RUST_LOG`'s directives do not override.
    level: Mutex<Level>,
    /// `RUST_LOG`, kept to be applied again on top of every new level.
    directives: Option<String>,
}

/// Opens the log file (`-o`), before the process daemonizes, so that a bad path is an error on the
/// terminal: `None` for stderr.
pub fn open_output(path: Option<&Path>) -> Result<Option<(PathBuf, File)>> {
    path.map(|p| {
        let file = open(p).with_context(|| format!("cannot open the log file {}", p.display()))?;
        Ok((p.to_path_buf(), file))
    })
    .transpose()
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Installs the process's subscriber: `level` unless `RUST_LOG` says otherwise for what it names.
pub fn install(level: Level, format: LogFormat, file: Option<(PathBuf, File)>) -> Arc<Log> {
    let directives = std::env::var("RUST_LOG")
        .ok()
        .filter(|d| !d.trim().is_empty());
    let (filter, handle) = reload::Layer::new(filter_for(level, directives.as_deref()));
    let ansi = file.is_none() && io::stderr().is_terminal();
    let output = Arc::new(match file {
        None => Output::Stderr,
        Some((path, file)) => Output::File {
            path,
            file: ArcSwap::from_pointee(file),
        },
    });
    let writer = Writer(Arc::clone(&output));
    let lines = tracing_subscriber::fmt::layer().with_writer(writer);
    let lines = match format {
        LogFormat::Text => lines.with_ansi(ansi).boxed(),
        LogFormat::Json => lines.json().boxed(),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .init();
    let fatal = match &*output {
        Output::Stderr => crate::fatal::install(io::stderr(), format == LogFormat::Json),
        Output::File { file, .. } => {
            crate::fatal::install(&**file.load(), format == LogFormat::Json)
        }
    };
    if let Err(e) = fatal {
        tracing::warn!(error = %e, "fatal signals (SIGSEGV, SIGABRT, ...) will not be logged");
    }
    Arc::new(Log {
        output,
        filter: handle,
        level: Mutex::new(level),
        directives,
    })
}

/// `level` for everything, then `RUST_LOG`'s directives (a bad one is left out, not fatal).
fn filter_for(level: Level, directives: Option<&str>) -> EnvFilter {
    EnvFilter::builder()
        .with_default_directive(tracing::level_filters::LevelFilter::from_level(level).into())
        .parse_lossy(directives.unwrap_or_default())
}

impl shardring_proxy::LogControl for Log {
    fn level(&self) -> Level {
        self.level.lock().map_or(Level::INFO, |l| *l)
    }

    fn set_level(&self, level: Level) {
        if let Ok(mut l) = self.level.lock() {
            *l = level;
        }
        let _ = self
            .filter
            .reload(filter_for(level, self.directives.as_deref()));
    }

    fn reopen(&self) -> io::Result<()> {
        match &*self.output {
            Output::Stderr => Ok(()),
            Output::File { path, file } => {
                let new = open(path)?;
                if let Err(e) = crate::fatal::follow(&new) {
                    tracing::warn!(error = %e, "a fatal signal would be logged in the old log file");
                }
                file.store(Arc::new(new));
                Ok(())
            }
        }
    }
}

/// Hands each event's formatter the current output.
#[derive(Debug, Clone)]
struct Writer(Arc<Output>);

impl<'a> MakeWriter<'a> for Writer {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        match &*self.0 {
            Output::Stderr => Line::Stderr(io::stderr()),
            Output::File { file, .. } => Line::File(file.load_full()),
        }
    }
}

/// Where one event is written.
#[derive(Debug)]
enum Line {
    Stderr(io::Stderr),
    File(Arc<File>),
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Line::Stderr(s) => s.write(buf),
            Line::File(f) => (&**f).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Line::Stderr(s) => s.flush(),
            Line::File(f) => (&**f).flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nutcrackers_levels_map_onto_ours() {
        assert_eq!(nutcracker_level(0), Level::ERROR);
        assert_eq!(nutcracker_level(3), Level::ERROR);
        assert_eq!(nutcracker_level(4), Level::WARN);
        assert_eq!(nutcracker_level(5), Level::INFO);
        assert_eq!(nutcracker_level(7), Level::DEBUG);
        assert_eq!(nutcracker_level(11), Level::TRACE);
    }
}
