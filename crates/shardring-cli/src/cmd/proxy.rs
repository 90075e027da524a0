//! `shardring proxy`: run the pools of a twemproxy (nutcracker) YAML file as a memcached and Redis sharding proxy.
//!
//! nutcracker's command line is accepted as it is (`-c -t -s -a -d -p -o -v -i -m -D -V -h`, each
//! with nutcracker's defaults where Debian's package has them, except the stats address: loopback),
//! so its init scripts and units run this binary unchanged.
//!
//! Signals: SIGINT/SIGTERM stop accepting, let in-flight requests finish (at most 30 s) and exit 0; a
//! second one exits at once. SIGHUP reopens the log file and re-reads the configuration once it reads
//! alike for 100 ms, then follows the file for 2 s, swapping every pool's servers and placement (a bad
//! file is refused with every problem logged and the running config kept). SIGTTIN/SIGTTOU raise and
//! lower the log level; SIGUSR1/SIGUSR2 are logged and ignored (`shardring_proxy::signals`). SIGSEGV,
//! SIGBUS, SIGILL, SIGFPE, SIGABRT and SIGSYS are logged by name before the process dies of them
//! (`crate::fatal`).
//!
//! Logs go to stderr, or to `-o FILE`; `--log-level` (or `-v N`) sets the level, `info` by default, and
//! `RUST_LOG`'s directives (e.g. `RUST_LOG=shardring_proxy=debug`) apply on top ([`crate::logging`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use shardring_proxy::config::{ConfigErrors, ProxyConfig};
use shardring_proxy::flags::ProxyFlags;
use shardring_proxy::{workers, RunOptions};

use crate::cmd::migrate::mark::Mark;
use crate::compat::{config_problems as config_error, load_config as load, read_config};
use crate::daemon::{self, DaemonFlags, PidFile};
use crate::logging::{self, LogFlags};

/// Where Debian's nutcracker reads its configuration when `-c` is not given (its unit and init
/// script pass none).
const DEFAULT_CONFIG: &str = "/etc/nutcracker/nutcracker.yml";

/// nutcracker's command line (`-c -t -s -a -d -p -o -v -i -m -D -V -h`), then the proxy's own
/// flags, each feature's beside it in the proxy crate ([`ProxyFlags`]).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The twemproxy YAML configuration file (nutcracker's `-c/--conf-file`).
    #[arg(long, short = 'c', visible_alias = "conf-file", value_name = "FILE",
          default_value = DEFAULT_CONFIG)]
    config: PathBuf,
    /// The pools' next membership, for a planned change (`shardring migrate`): a twemproxy YAML
    /// file whose pools of the same names give their servers, hash, hash tag and distribution
    /// (nothing else of it is read). While a pool's next membership places keys differently,
    /// writes of the keys whose owner changes go to both owners; reads stay on the owner now.
    /// Re-read with the configuration on SIGHUP.
    #[arg(long, value_name = "FILE", conflicts_with = "etcd")]
    next_config: Option<PathBuf>,
    /// Check the configuration and exit (0 when it is valid), like `nutcracker -t`.
    #[arg(long, short = 't')]
    test_conf: bool,
    /// The port of twemproxy's stats JSON.
    #[arg(long, short = 's', default_value_t = 22222)]
    stats_port: u16,
    /// The address the stats port binds (loopback by default, where nutcracker binds 0.0.0.0: stats
    /// are not for the world).
    #[arg(long, short = 'a', default_value = "127.0.0.1")]
    stats_addr: String,
    /// `-d`, `-p`.
    #[command(flatten)]
    daemon: DaemonFlags,
    /// `-o`, `-v`, `--log-level`, `--log-format`.
    #[command(flatten)]
    log: LogFlags,
    /// Accepted for nutcracker's command line (its stats aggregation interval, ms); no effect here:
    /// the stats JSON is current at every read.
    #[arg(long, short = 'i', value_name = "MS")]
    stats_interval: Option<u64>,
    /// Accepted for nutcracker's command line (its buffer chunk size); no effect here: buffers are
    /// sized per connection as requests need.
    #[arg(long, short = 'm', value_name = "BYTES")]
    mbuf_size: Option<u64>,
    /// Print what every counter of the stats JSON counts, and exit (nutcracker's -D).
    #[arg(long, short = 'D')]
    describe_stats: bool,
    /// Print the version on stderr, and exit (nutcracker's -V): `This is nutcracker-0.5.0 compatible
    /// shardring-proxy VERSION`, a line the patterns scripts apply to nutcracker's `This is
    /// nutcracker-0.5.0` read as the nutcracker version whose behaviour this proxy keeps.
    #[arg(long, short = 'V')]
    version: bool,
    /// Every flag of the proxy's features.
    #[command(flatten)]
    proxy: ProxyFlags,
}

pub fn run(args: Args) -> Result<()> {
    if args.version {
        eprintln!("{}", version_line());
        return Ok(());
    }
    if args.describe_stats {
        return describe_stats();
    }
    let flags = args.proxy;
    let config = load(&args.config)
        .and_then(|c| flags.apply(c))
        .map_err(|e| config_error(&args.config, &e))?;
    let config = with_next(config, args.next_config.as_deref())?;
    for line in flags.unused(&config) {
        eprintln!("shardring: {line}");
    }
    if args.test_conf {
        println!(
            "shardring: configuration file '{}' syntax is ok",
            args.config.display()
        );
        return Ok(());
    }
    // Absolute before -d moves the process to /: the reloads re-read the file at this path.
    let config_path = daemon::absolute(&args.config)?;
    let pid_path = args.daemon.pid_path()?;
    let log_file = logging::open_output(args.log.output.as_deref())?;
    if args.daemon.daemonize {
        daemon::detach()?;
    }
    let log = logging::install(args.log.level(), args.log.log_format, log_file);
    // After the log is up: past -d, an error here reaches the log file only.
    let _pid_file = match pid_path.as_deref().map(PidFile::create).transpose() {
        Ok(pid_file) => pid_file,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "cannot start");
            return Err(e);
        }
    };
    let options = RunOptions {
        stats_addr: format!("{}:{}", args.stats_addr, args.stats_port),
        log: Some(log),
        ..flags.run_options()
    };
    let no_effect = [
        ("-i/--stats-interval", args.stats_interval),
        ("-m/--mbuf-size", args.mbuf_size),
    ];
    for (flag, value) in no_effect {
        if let Some(value) = value {
            tracing::info!(
                flag,
                value,
                "accepted for nutcracker's command line; it has no effect here"
            );
        }
    }
    tracing::info!(workers = options.workers, config = %config_path.display(), "starting");
    let runtime = workers::control_runtime().context("starting the runtime")?;
    let next_path = args
        .next_config
        .as_deref()
        .map(daemon::absolute)
        .transpose()?;
    let reload = move || {
        let config = load(&config_path).and_then(|c| flags.apply(c))?;
        let Some(path) = &next_path else {
            return Ok(config);
        };
        let (config, notes) = next_applied(config, path)?;
        for note in notes {
            tracing::info!("{note}");
        }
        Ok(config)
    };
    let result = runtime.block_on(async {
        // On the control runtime's thread (worker 0's with one worker), not a thread of its own.
        let purging = tokio::spawn(crate::allocator::return_memory_while_idle());
        let result = shardring_proxy::run(config, options, reload).await;
        purging.abort();
        result
    });
    if let (Err(e), Some(_)) = (&result, &args.log.output) {
        // Also in the log file: after -d, stderr is /dev/null.
        tracing::error!(error = %shardring_etcd::error_chain(e), "the proxy stopped");
    }
    Ok(result?)
}

/// `config` with the next membership of `--next-config`'s file, when given.
fn with_next(config: ProxyConfig, path: Option<&Path>) -> Result<ProxyConfig> {
    let Some(path) = path else {
        return Ok(config);
    };
    let (config, notes) = next_applied(config, path).map_err(|e| config_error(path, &e))?;
    for note in notes {
        eprintln!("shardring: {note}");
    }
    Ok(config)
}

/// `config` with the next membership of the file at `path`, and the cut-over that file's marks
/// record ([`Mark::apply`]: `shardring migrate` writes the next file before the proxies' own), read
/// from one read of the file. With the lines to log.
fn next_applied(
    config: ProxyConfig,
    path: &Path,
) -> Result<(ProxyConfig, Vec<String>), ConfigErrors> {
    let text = read_config(path)?;
    let next = ProxyConfig::from_yaml(&text)?;
    let (config, notes) = Mark::apply(config, &text);
    // Checked with its next membership: a next Redis Cluster refuses what a cluster pool would.
    let config = config.with_next(&next)?;
    config.validate()?;
    Ok((config, notes))
}

/// The nutcracker release whose command line, configuration, placement and stats this proxy keeps.
const NUTCRACKER_VERSION: &str = "0.5.0";

/// `-V`: nutcracker's line in a form its readers parse (`This is nutcracker-(\S+)`, the first version
/// number, the first line split on `-`) to the nutcracker version kept, without saying the program
/// is nutcracker; this proxy's own name and version follow.
fn version_line() -> String {
    format!(
        "This is nutcracker-{NUTCRACKER_VERSION} compatible {}",
        shardring_proxy::NAME_VERSION
    )
}

/// `-D`: every counter of the stats JSON and what it counts, laid out as nutcracker prints them.
fn describe_stats() -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "This is {}", shardring_proxy::NAME_VERSION)?;
    for (title, table) in [
        ("pool stats", shardring_proxy::metrics::POOL_STATS),
        ("server stats", shardring_proxy::metrics::SERVER_STATS),
    ] {
        writeln!(out, "\n{title}:")?;
        for (name, what) in table {
            writeln!(out, "  {name:<24}{what:?}")?;
        }
    }
    Ok(())
}
