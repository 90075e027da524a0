//! `shardring proxy`: run the pools of a twemproxy (nutcracker) YAML file as a memcached sharding proxy.
//!
//! Signals: SIGINT/SIGTERM stop accepting, let in-flight requests finish (at most 30 s) and exit 0; a
//! second one exits at once. SIGHUP re-reads the file and swaps every pool's servers and placement; a bad
//! file is refused with every problem logged and the running config kept.
//!
//! Logs go to stderr; `RUST_LOG` (e.g. `RUST_LOG=shardring_proxy=debug`) picks what is logged, `info` by
//! default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use shardring_proxy::{membership, workers, ConfigErrors, ProxyConfig, RunOptions};

/// Flags named like nutcracker's where it has them (`-c`, `-t`, `-s`, `-a`).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The twemproxy YAML configuration file.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// Check the configuration and exit (0 when it is valid), like `nutcracker -t`.
    #[arg(long, short = 't')]
    test_conf: bool,
    /// The port of twemproxy's stats JSON.
    #[arg(long, short = 's', default_value_t = 22222)]
    stats_port: u16,
    /// The address the stats port binds (loopback by default: stats are not for the world).
    #[arg(long, short = 'a', default_value = "127.0.0.1")]
    stats_addr: String,
    /// Serve Prometheus text at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Worker threads. By default: one on a machine with up to 4 CPUs (everything on one thread, as
    /// nutcracker runs: the least CPU per request when the proxy shares a small machine with its
    /// servers and clients), else half the CPUs, at most 32 (CPUs as cgroup quotas and affinity allow).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// The largest value a client may store, for every pool (memcached's `-I`): bytes, or with a
    /// `k`/`m` suffix. Larger ones get `SERVER_ERROR object too large for cache`. [default: 1m]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_value_size: Option<usize>,
    /// A multi-get fails whole (`SERVER_ERROR`) when one of its servers fails, as in twemproxy; by
    /// default the keys that could be fetched are returned.
    #[arg(long)]
    multiget_all_or_nothing: bool,
    /// How often every server is probed with `version` to eject dead ones and let recovered ones
    /// rejoin, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    health_check_interval: u64,
    /// Take every pool's servers from etcd (comma-separated endpoints) instead of the file; the file
    /// still gives each pool's listen address and settings. See `shardring members`.
    #[arg(long, value_name = "URL[,URL...]")]
    etcd: Option<String>,
    /// The etcd key prefix: a pool's servers are <P><pool>/servers/<name> = host:port[:weight].
    #[arg(
        long,
        value_name = "P",
        default_value = "/shardring/",
        requires = "etcd"
    )]
    etcd_prefix: String,
    /// When etcd cannot be read at start, start from the file's servers (and keep retrying).
    #[arg(long, requires = "etcd")]
    etcd_fallback: bool,
    /// Apply a pool with no servers in etcd instead of refusing it (by default the servers are kept).
    #[arg(long, requires = "etcd")]
    allow_empty: bool,
}

/// The largest `--max-value-size`: memcached's own limit for `-I`.
const MAX_VALUE_SIZE: usize = 1 << 30;

/// `1048576`, `512k`, `2m` → bytes.
fn parse_size(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&text[..i], 1 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&text[..i], 1 << 20),
        _ => (text, 1),
    };
    let size = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("not a size: {text:?} (bytes, or a number with k or m)"))?;
    if size == 0 || size > MAX_VALUE_SIZE {
        return Err(format!("must be between 1 byte and 1024m, not {text}"));
    }
    Ok(size)
}

/// The proxy-only settings the command line gives every pool (a twemproxy file has no keys for them, and
/// extra keys would make it unreadable by nutcracker). Applied at start and on every reload.
#[derive(Debug, Clone, Copy)]
struct Overrides {
    max_value_size: Option<usize>,
    multiget_all_or_nothing: bool,
    health_check_interval: Duration,
}

impl Overrides {
    fn from_args(args: &Args) -> Overrides {
        Overrides {
            max_value_size: args.max_value_size,
            multiget_all_or_nothing: args.multiget_all_or_nothing,
            health_check_interval: Duration::from_millis(args.health_check_interval),
        }
    }

    fn apply(self, mut config: ProxyConfig) -> ProxyConfig {
        for pool in &mut config.pools {
            if let Some(size) = self.max_value_size {
                pool.limits.max_value_len = size;
            }
            pool.multiget_all_or_nothing = self.multiget_all_or_nothing;
            pool.health_check_interval = self.health_check_interval;
        }
        config
    }
}

fn load(path: &Path) -> Result<ProxyConfig, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let mut errors = ConfigErrors::default();
        errors.push("", format!("cannot read {}: {e}", path.display()));
        errors
    })?;
    ProxyConfig::from_yaml(&text)
}

fn config_error(path: &Path, e: &ConfigErrors) -> anyhow::Error {
    crate::compat::config_problems(path, e)
}

pub fn run(args: Args) -> Result<()> {
    let overrides = Overrides::from_args(&args);
    let config = load(&args.config)
        .map(|c| overrides.apply(c))
        .map_err(|e| config_error(&args.config, &e))?;
    if args.test_conf {
        println!(
            "shardring: configuration file '{}' syntax is ok",
            args.config.display()
        );
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in log files or journald.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let workers = args.threads.map_or_else(
        || workers::default_workers(workers::available_cpus()),
        usize::from,
    );
    tracing::info!(workers, "starting");
    let runtime = workers::runtime(workers).context("starting the runtime")?;
    let options = RunOptions {
        stats_addr: format!("{}:{}", args.stats_addr, args.stats_port),
        metrics_addr: args.metrics_addr.clone(),
        membership: args.etcd.as_ref().map(|urls| {
            membership::EtcdMembership::new(urls.split(',').map(str::trim))
                .prefix(args.etcd_prefix.as_str())
                .fallback(args.etcd_fallback)
                .allow_empty(args.allow_empty)
        }),
        ..RunOptions::default()
    };
    let path = args.config.clone();
    let reload = move || load(&path).map(|c| overrides.apply(c));
    runtime
        .block_on(shardring_proxy::run(config, options, reload))
        .context("shardring proxy")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_memcacheds() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1024m"), Ok(1 << 30));
        for bad in [
            "",
            "0",
            "k",
            "1.5m",
            "-1",
            "1025m",
            "99999999999999999999",
            "1g",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
