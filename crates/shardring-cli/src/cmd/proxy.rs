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
use std::time::Duration;

use anyhow::{Context, Result};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring_proxy::config::Overrides;
use shardring_proxy::{membership, workers, RunOptions};

use crate::compat::{config_problems as config_error, load_config as load};
use crate::daemon::{self, PidFile};
use crate::logging::{self, LogFormat};

/// Where Debian's nutcracker reads its configuration when `-c` is not given (its unit and init
/// script pass none).
const DEFAULT_CONFIG: &str = "/etc/nutcracker/nutcracker.yml";

/// Where Debian's nutcracker writes its pid when it daemonizes (`-d`) without `-p`.
const DEFAULT_PID_FILE: &str = "/run/nutcracker/nutcracker.pid";

/// Flags named like nutcracker's where it has them (`-c -t -s -a -d -p -o -v -i -m -D -V -h`).
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
    /// Run as a daemon: detach from the terminal, work in /, stdin, stdout and stderr to /dev/null
    /// (log with -o FILE). The configuration and flags are checked first, on the terminal.
    #[arg(long, short = 'd')]
    daemonize: bool,
    /// Write the proxy's pid to FILE (after -d detaches) and remove it on exit. With -d and no -p:
    /// /run/nutcracker/nutcracker.pid when /run/nutcracker exists, as Debian's nutcracker does.
    #[arg(long, short = 'p', value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Log to FILE (appended; SIGHUP reopens it, for logrotate) instead of stderr.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// nutcracker's log level, 0 to 11 (5, notice, its default): 0-3 mean error, 4 warn, 5-6 info,
    /// 7 debug, 8-11 trace.
    #[arg(long, short = 'v', value_name = "N", conflicts_with = "log_level",
          value_parser = clap::value_parser!(u8).range(0..=11))]
    verbose: Option<u8>,
    /// The log level: error, warn, info, debug or trace. RUST_LOG's directives (RUST_LOG=
    /// shardring_proxy=debug) apply on top; SIGTTIN and SIGTTOU move it one step. [default: info]
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<tracing::Level>,
    /// The log's form: text, or json (one object a line).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
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
    /// Serve Prometheus text at http://HOST:PORT/metrics, and JSON at /hotkeys (the hot keys,
    /// --hot-keys) and /command-latency (each Redis command's latency), which nutcracker's stats JSON
    /// has no place for.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Worker threads, each accepting and serving its own clients with its own server connections (N
    /// workers open N × server_connections connections to each server). By default: one on a machine
    /// with up to 4 CPUs (everything on one thread, as nutcracker runs: the least CPU per request when
    /// the proxy shares a small machine with its servers and clients), else half the CPUs, at most 32
    /// (CPUs as cgroup quotas and affinity allow).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// The largest value a client may store, for every pool (memcached's `-I`): bytes, or with a
    /// `k`, `m` or `g` suffix. Larger ones get `SERVER_ERROR object too large for cache`. By
    /// default, a memcached pool asks each server its `item_size_max` (`stats settings`) and takes the
    /// largest, so it refuses no value its servers would store (up to 1g until every server has said);
    /// this flag overrides that. In redis pools, the longest argument (Redis's
    /// `proto-max-bulk-len`): a longer one gets a protocol error and the connection is closed before
    /// it is buffered. [default: the servers' own for memcached pools, 512m for redis pools]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_value_size: Option<usize>,
    /// Redis pools: the longest request a client may send, all its arguments together (Redis's
    /// `client-query-buffer-limit`), which bounds what one client can make the proxy buffer: a longer
    /// one gets a protocol error and the connection is closed before it is buffered. Bytes, or with
    /// a `k`, `m` or `g` suffix. [default: 1g]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_request_size: Option<usize>,
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
    /// The etcd key prefix: a pool's servers are <P><pool>/servers/<name> = host:port[:weight] (a
    /// trailing / is added when missing).
    #[arg(
        long,
        value_name = "P",
        default_value = "/shardring/",
        requires = "etcd",
        value_parser = parse_prefix
    )]
    etcd_prefix: String,
    /// When etcd cannot be read at start, start from the file's servers (and keep retrying).
    #[arg(long, requires = "etcd")]
    etcd_fallback: bool,
    /// Apply a pool with no servers in etcd instead of refusing it (by default the servers are kept).
    #[arg(long, requires = "etcd")]
    allow_empty: bool,
    /// Track each pool's K heaviest keys over a sliding window (a count-min sketch; shown in the stats
    /// JSON and at /hotkeys beside /metrics). Off by default.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=1000))]
    hot_keys: Option<u16>,
    /// The hot-key window in milliseconds (counts cover between half of it and all of it).
    #[arg(long, value_name = "MS", default_value_t = 10_000, requires = "hot_keys",
          value_parser = clap::value_parser!(u64).range(2..=3_600_000))]
    hot_keys_window: u64,
    /// Serve `get`s of the top keys from a cache in the proxy, each reply for at most MS milliseconds
    /// after it was fetched; writes through the proxy invalidate it. Needs --hot-keys.
    #[arg(long, value_name = "MS", requires = "hot_keys",
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    hot_cache_ttl: Option<u64>,
    /// The hot-key cache's size bound: bytes, or with a `k`/`m` suffix. [default: 1m]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "hot_cache_ttl")]
    hot_cache_size: Option<usize>,
    /// Keep every key on R servers: its owner (placed as nutcracker places it) and the ring's next
    /// distinct servers. Writes go to all live ones, reads to the first live one and on to the next on
    /// an error, so a dead server costs no misses. `R` applies to every memcached pool, `POOL=R` to one
    /// pool, memcached or redis (repeat the flag for several; a pool's own setting wins over the plain
    /// one; a redis pool's writes are the commands Redis flags `write`). [default: 1]
    #[arg(long, value_name = "[POOL=]R", value_parser = parse_replicas)]
    replicas: Vec<(Option<String>, u16)>,
    /// With --replicas, a read that misses also tries the next replica (a restarted, empty server then
    /// still reads what its peers kept), at one more round trip per miss.
    #[arg(long)]
    replica_read_miss: bool,
    /// A gutter pool for pools without replicas (Facebook's design): while a server is ejected, its
    /// keys go to these servers (`HOST:PORT[:WEIGHT]`, comma-separated) with their TTLs capped, instead
    /// of to the next servers of the ring. Needs auto_eject_hosts in the pool to take effect.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',', value_parser = parse_gutter_server)]
    gutter: Vec<TwemproxyServer>,
    /// The longest TTL, in seconds, of a value stored in the gutter.
    #[arg(long, value_name = "SECS", default_value_t = 10, requires = "gutter",
          value_parser = clap::value_parser!(u32).range(1..=2_592_000))]
    gutter_ttl: u32,
    /// For this many milliseconds after a reload changes a pool's servers, a key that moved is still
    /// found on its previous server: a `get` that misses on the key's new server is retried there and
    /// a hit is copied over (with its flags and remaining TTL, never over a newer write or a delete),
    /// and any other command of the key (append, incr, delete, cas, gets, the meta commands, …) copies
    /// it first, then applies, so it answers as if the key had never moved. Off by default.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    warmup_window: Option<u64>,
    /// Redis pools: the Redis 6 ACL user the proxy authenticates its server connections as, with the
    /// pool's redis_auth as its password (`AUTH NAME PASSWORD`); clients may then name this user (or
    /// `default`) in AUTH and HELLO. `NAME` applies to every redis pool, `POOL=NAME` to one. By
    /// default, Redis's `default` user (`AUTH PASSWORD`, as nutcracker sends).
    #[arg(long, value_name = "[POOL=]NAME", value_parser = parse_redis_user)]
    redis_user: Vec<(Option<String>, String)>,
    /// Redis pools: the most connections of their own each server may have at once, for clients
    /// inside WATCH … EXEC or running a blocking command (BLPOP, XREAD BLOCK, …); a client that needs
    /// one past this gets an error and nothing is sent. [default: 64]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    redis_dedicated_connections: Option<u32>,
    /// Redis pools: an MGET one of whose servers fails answers the keys that could be read and an
    /// error element for each other key, instead of one error naming the server (the default, as
    /// nutcracker answers). Only for clients that check each element's type: redis-py and most
    /// clients return such an element as the key's value. Every redis pool, or `=POOL`.
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch)]
    redis_partial_reads: Vec<Option<String>>,
    /// TLS on a pool's listener: its certificate chain (PEM, its own certificate first). `PATH`
    /// applies to every pool, `POOL=PATH` to one (repeat the flag for several). Needs --tls-key.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    tls_cert: Vec<(Option<String>, PathBuf)>,
    /// The listener certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1), as --tls-cert.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    tls_key: Vec<(Option<String>, PathBuf)>,
    /// Mutual TLS on the listener: clients must present a certificate signed by one of these CAs
    /// (PEM); one without is refused at the handshake, before any command is read.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    tls_client_ca: Vec<(Option<String>, PathBuf)>,
    /// TLS to the servers: of every pool (`--server-tls`), or of one (`--server-tls=POOL`, repeat
    /// for several). Certificates are checked against --server-ca, else the system's CAs, for the
    /// host name of each server line (sent as SNI).
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch, help_heading = "TLS")]
    server_tls: Vec<Option<String>>,
    /// The CA certificates (PEM) the servers' certificates must chain to. [default: the system's]
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    server_ca: Vec<(Option<String>, PathBuf)>,
    /// A client certificate chain (PEM) for servers that ask for one. Needs --server-key.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    server_cert: Vec<(Option<String>, PathBuf)>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    server_key: Vec<(Option<String>, PathBuf)>,
    /// FOR TESTS ONLY: take any certificate from the servers, unchecked (encrypted, but anyone on
    /// the path can pose as a server). Every pool, or `=POOL`.
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch, help_heading = "TLS")]
    server_tls_insecure: Vec<Option<String>>,
    /// Redis pools: follow each server's master through these Sentinels; every server line's name
    /// is its master group (`host:port:weight group`, placement by name, so a failover moves no key).
    /// `POOL=HOST:PORT,...` for one pool (repeat for several), a bare list for every redis pool.
    /// Sentinels speak TLS when the pool's servers do (--server-tls, the same CA).
    #[arg(long, value_name = "[POOL=]HOST:PORT,...", value_parser = parse_sentinels)]
    sentinel: Vec<(Option<String>, Vec<String>)>,
    /// The Sentinels' password (their `requirepass`), as --sentinel: `POOL=PASSWORD` or `PASSWORD`.
    #[arg(long, value_name = "[POOL=]PASSWORD", value_parser = parse_sentinel_auth)]
    sentinel_auth: Vec<(Option<String>, String)>,
}

/// `HOST:PORT,...` or `POOL=HOST:PORT,...` → (pool, Sentinel addresses).
fn parse_sentinels(text: &str) -> Result<(Option<String>, Vec<String>), String> {
    let (pool, list) = pool_prefixed(text);
    let addrs: Vec<String> = list.split(',').map(str::trim).map(str::to_owned).collect();
    for a in &addrs {
        let port_ok = a.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(format!(
                "not a Sentinel address: {a:?} in {text:?} ([POOL=]HOST:PORT,HOST:PORT...)"
            ));
        }
    }
    Ok((pool, addrs))
}

/// `PASSWORD` or `POOL=PASSWORD` → (pool, password). A password with `=` in it needs the `POOL=`.
fn parse_sentinel_auth(text: &str) -> Result<(Option<String>, String), String> {
    let (pool, password) = pool_prefixed(text);
    if password.is_empty() {
        return Err("an empty Sentinel password".into());
    }
    Ok((pool, password.to_owned()))
}

/// `POOL=VALUE` → (the pool, the value); anything else is a value for every pool. A pool's name has
/// no `/`, so a path with `=` in it (`/etc/tls/a=b.pem`) stays a path.
fn pool_prefixed(text: &str) -> (Option<String>, &str) {
    match text.split_once('=') {
        Some((pool, value)) if !pool.is_empty() && !pool.contains('/') => {
            (Some(pool.to_owned()), value)
        }
        _ => (None, text),
    }
}

/// `PATH` or `POOL=PATH` → (pool, path).
fn parse_pool_path(text: &str) -> Result<(Option<String>, PathBuf), String> {
    let (pool, path) = pool_prefixed(text);
    if path.is_empty() {
        return Err(format!("no path in {text:?} (PATH or POOL=PATH)"));
    }
    Ok((pool, PathBuf::from(path)))
}

/// A switch's value: empty (given bare) → every pool, else the pool's name.
fn parse_pool_switch(text: &str) -> Result<Option<String>, String> {
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

/// `NAME` or `POOL=NAME` → (pool, user).
fn parse_redis_user(text: &str) -> Result<(Option<String>, String), String> {
    let (pool, user) = match text.split_once('=') {
        Some((pool, user)) if !pool.is_empty() => (Some(pool.to_owned()), user),
        _ => (None, text),
    };
    if user.is_empty() || user.contains(char::is_whitespace) {
        return Err(format!(
            "not a user name: {text:?} (NAME or POOL=NAME, without spaces)"
        ));
    }
    Ok((pool, user.to_owned()))
}

/// `R` or `POOL=R` → (pool, R), R between 1 and 16.
fn parse_replicas(text: &str) -> Result<(Option<String>, u16), String> {
    let (pool, count) = match text.rsplit_once('=') {
        Some((pool, count)) if !pool.is_empty() => (Some(pool.to_owned()), count),
        _ => (None, text),
    };
    match count.parse::<u16>() {
        Ok(r) if (1..=16).contains(&r) => Ok((pool, r)),
        _ => Err(format!(
            "not a replica count between 1 and 16: {text:?} (R or POOL=R)"
        )),
    }
}

/// `host:port` or `host:port:weight` → a server (weight 1 when not given).
fn parse_gutter_server(text: &str) -> Result<TwemproxyServer, String> {
    let with_weight = if text.matches(':').count() >= 2 {
        text.to_owned()
    } else {
        format!("{text}:1")
    };
    with_weight
        .parse::<TwemproxyServer>()
        .map_err(|e| format!("gutter server {text:?}: {e}"))
}

/// `--etcd-prefix`: a trailing `/` added when missing, so a pool's name never runs into the prefix.
pub fn parse_prefix(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("an empty prefix; the default is /shardring/".into());
    }
    Ok(shardring_etcd::layout::normalise_prefix(text))
}

/// The largest `--max-value-size` and `--max-request-size`: memcached's own limit for `-I`, and the
/// default of Redis's `client-query-buffer-limit`.
const MAX_VALUE_SIZE: usize = 1 << 30;

/// `1048576`, `512k`, `2m` → bytes.
fn parse_size(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&text[..i], 1 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&text[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    let size = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("not a size: {text:?} (bytes, or a number with k, m or g)"))?;
    if size == 0 || size > MAX_VALUE_SIZE {
        return Err(format!("must be between 1 byte and 1g, not {text}"));
    }
    Ok(size)
}

/// The proxy-only flags, as the proxy crate's flag rules take them ([`Overrides::apply`] decides
/// what each sets on which pools, at start and on every reload).
fn overrides(args: &Args) -> Overrides {
    Overrides {
        max_value_size: args.max_value_size,
        max_request_size: args.max_request_size,
        multiget_all_or_nothing: args.multiget_all_or_nothing,
        health_check_interval: Duration::from_millis(args.health_check_interval),
        hot_keys: args.hot_keys,
        hot_keys_window: Duration::from_millis(args.hot_keys_window),
        hot_cache_ttl: args.hot_cache_ttl.map(Duration::from_millis),
        hot_cache_size: args.hot_cache_size,
        replicas: args.replicas.clone(),
        replica_read_miss: args.replica_read_miss,
        gutter: args.gutter.clone(),
        gutter_ttl: args.gutter_ttl,
        warmup_window: args.warmup_window.map(Duration::from_millis),
        redis_user: args.redis_user.clone(),
        redis_dedicated_connections: args.redis_dedicated_connections,
        tls_cert: args.tls_cert.clone(),
        tls_key: args.tls_key.clone(),
        tls_client_ca: args.tls_client_ca.clone(),
        server_tls: args.server_tls.clone(),
        server_ca: args.server_ca.clone(),
        server_cert: args.server_cert.clone(),
        server_key: args.server_key.clone(),
        server_tls_insecure: args.server_tls_insecure.clone(),
        sentinel: args.sentinel.clone(),
        sentinel_auth: args.sentinel_auth.clone(),
        redis_partial_reads: args.redis_partial_reads.clone(),
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.version {
        eprintln!("{}", version_line());
        return Ok(());
    }
    if args.describe_stats {
        return describe_stats();
    }
    let overrides = overrides(&args);
    let config = load(&args.config)
        .and_then(|c| overrides.apply(c))
        .map_err(|e| config_error(&args.config, &e))?;
    let config = with_next(config, args.next_config.as_deref())?;
    for line in overrides.unused_by_redis(&config) {
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
    let pid_path = match &args.pid_file {
        Some(path) => Some(daemon::absolute(path)?),
        // Debian's nutcracker writes this one when it daemonizes without -p; its init script reads
        // it (start-stop-daemon --pidfile) after making the directory.
        None if args.daemonize
            && Path::new(DEFAULT_PID_FILE)
                .parent()
                .is_some_and(Path::is_dir) =>
        {
            Some(DEFAULT_PID_FILE.into())
        }
        None => None,
    };
    let log_file = logging::open_output(args.output.as_deref())?;
    if args.daemonize {
        daemon::detach()?;
    }
    let level = match (args.log_level, args.verbose) {
        (Some(level), _) => level,
        (None, Some(n)) => logging::nutcracker_level(n),
        (None, None) => tracing::Level::INFO,
    };
    let log = logging::install(level, args.log_format, log_file);
    // After the log is up: past -d, an error here reaches the log file only.
    let _pid_file = match pid_path.as_deref().map(PidFile::create).transpose() {
        Ok(pid_file) => pid_file,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "cannot start");
            return Err(e);
        }
    };
    let cpus = workers::available_cpus();
    let workers = args
        .threads
        .map_or_else(|| workers::default_workers(cpus), usize::from);
    if workers > cpus {
        tracing::warn!(
            workers,
            cpus,
            "more worker threads than CPUs: they take turns on the CPUs, adding latency and no \
             throughput (leave --threads out for the default)"
        );
    }
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
    tracing::info!(workers, config = %config_path.display(), "starting");
    let runtime = workers::control_runtime().context("starting the runtime")?;
    let options = RunOptions {
        workers,
        stats_addr: format!("{}:{}", args.stats_addr, args.stats_port),
        metrics_addr: args.metrics_addr.clone(),
        membership: args.etcd.as_ref().map(|urls| {
            membership::EtcdMembership::new(urls.split(',').map(str::trim))
                .prefix(args.etcd_prefix.as_str())
                .fallback(args.etcd_fallback)
                .allow_empty(args.allow_empty)
        }),
        log: Some(log),
        ..RunOptions::default()
    };
    let next_path = args
        .next_config
        .as_deref()
        .map(daemon::absolute)
        .transpose()?;
    let reload = move || {
        let config = load(&config_path).and_then(|c| overrides.apply(c))?;
        match &next_path {
            Some(path) => config.with_next(&load(path)?),
            None => Ok(config),
        }
    };
    let result = runtime.block_on(async {
        // On the control runtime's thread (worker 0's with one worker), not a thread of its own.
        let purging = tokio::spawn(crate::allocator::return_memory_while_idle());
        let result = shardring_proxy::run(config, options, reload).await;
        purging.abort();
        result
    });
    if let (Err(e), Some(_)) = (&result, &args.output) {
        // Also in the log file: after -d, stderr is /dev/null.
        tracing::error!(error = %shardring_etcd::error_chain(e), "the proxy stopped");
    }
    Ok(result?)
}

/// `config` with the next membership of `--next-config`'s file, when given.
fn with_next(
    config: shardring_proxy::config::ProxyConfig,
    path: Option<&Path>,
) -> Result<shardring_proxy::config::ProxyConfig> {
    let Some(path) = path else {
        return Ok(config);
    };
    load(path)
        .and_then(|next| config.with_next(&next))
        .map_err(|e| config_error(path, &e))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_users_name_a_pool_or_every_pool_and_have_no_spaces() {
        assert_eq!(parse_redis_user("app"), Ok((None, "app".into())));
        assert_eq!(
            parse_redis_user("rd=app"),
            Ok((Some("rd".into()), "app".into()))
        );
        for bad in ["", "rd=", "a b", "rd=a b"] {
            assert!(parse_redis_user(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn replica_counts_name_a_pool_or_every_pool() {
        assert_eq!(parse_replicas("2"), Ok((None, 2)));
        assert_eq!(parse_replicas("alpha=3"), Ok((Some("alpha".into()), 3)));
        for bad in ["0", "17", "x", "alpha=", "=2x", "alpha=0"] {
            assert!(parse_replicas(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_etcd_prefix_gets_its_trailing_slash() {
        assert_eq!(parse_prefix("/shardring/").unwrap(), "/shardring/");
        assert_eq!(parse_prefix("none").unwrap(), "none/");
        assert!(parse_prefix("").is_err());
    }

    #[test]
    fn sizes_read_like_memcacheds() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1024m"), Ok(1 << 30));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        for bad in [
            "",
            "0",
            "k",
            "1.5m",
            "-1",
            "1025m",
            "99999999999999999999",
            "2g",
            "1t",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    /// The command line as clap reads it.
    #[derive(clap::Parser)]
    struct Line {
        #[command(flatten)]
        args: Args,
    }

    /// The flags of a command line of `flags`.
    fn parsed(flags: &[&str]) -> Overrides {
        use clap::Parser;
        let line = Line::try_parse_from(["proxy", "-c", "unused.yml"].iter().chain(flags)).unwrap();
        overrides(&line.args)
    }

    #[test]
    fn flags_left_out_mean_what_the_flag_rules_default_to() {
        assert_eq!(parsed(&[]), Overrides::default());
    }

    #[test]
    fn every_flag_reaches_its_override() {
        let flags = parsed(&[
            "--max-value-size",
            "2k",
            "--max-request-size",
            "8k",
            "--multiget-all-or-nothing",
            "--health-check-interval",
            "250",
            "--hot-keys",
            "10",
            "--hot-keys-window",
            "2000",
            "--hot-cache-ttl",
            "50",
            "--hot-cache-size",
            "64k",
            "--replicas",
            "2",
            "--replicas",
            "mc=3",
            "--replica-read-miss",
            "--gutter",
            "127.0.0.1:9,127.0.0.1:10:2",
            "--gutter-ttl",
            "30",
            "--warmup-window",
            "500",
            "--redis-user",
            "app",
            "--redis-user",
            "rd=ops",
            "--redis-dedicated-connections",
            "8",
            "--tls-cert",
            "/etc/tls/proxy.pem",
            "--tls-key",
            "mc=/etc/tls/mc.key",
            "--tls-client-ca",
            "/etc/tls/clients=ca.pem",
            "--server-tls",
            "--server-tls=rd",
            "--server-ca",
            "rd=/etc/tls/servers.pem",
            "--server-cert",
            "/etc/tls/me.pem",
            "--server-key",
            "/etc/tls/me.key",
            "--server-tls-insecure=mc",
            "--sentinel",
            "rd=127.0.0.1:26379,10.0.0.2:26379",
            "--sentinel-auth",
            "rd=s3cret",
            "--redis-partial-reads=rd",
        ]);
        let ms = Duration::from_millis;
        assert_eq!(
            flags,
            Overrides {
                max_value_size: Some(2048),
                max_request_size: Some(8192),
                multiget_all_or_nothing: true,
                health_check_interval: ms(250),
                hot_keys: Some(10),
                hot_keys_window: ms(2000),
                hot_cache_ttl: Some(ms(50)),
                hot_cache_size: Some(64 << 10),
                replicas: vec![(None, 2), (Some("mc".into()), 3)],
                replica_read_miss: true,
                gutter: vec![
                    "127.0.0.1:9:1".parse().unwrap(),
                    "127.0.0.1:10:2".parse().unwrap()
                ],
                gutter_ttl: 30,
                warmup_window: Some(ms(500)),
                redis_user: vec![(None, "app".into()), (Some("rd".into()), "ops".into())],
                redis_dedicated_connections: Some(8),
                tls_cert: vec![(None, "/etc/tls/proxy.pem".into())],
                tls_key: vec![(Some("mc".into()), "/etc/tls/mc.key".into())],
                // A path with `=` in it is a path, not POOL=PATH.
                tls_client_ca: vec![(None, "/etc/tls/clients=ca.pem".into())],
                server_tls: vec![None, Some("rd".into())],
                server_ca: vec![(Some("rd".into()), "/etc/tls/servers.pem".into())],
                server_cert: vec![(None, "/etc/tls/me.pem".into())],
                server_key: vec![(None, "/etc/tls/me.key".into())],
                server_tls_insecure: vec![Some("mc".into())],
                sentinel: vec![(
                    Some("rd".into()),
                    vec!["127.0.0.1:26379".into(), "10.0.0.2:26379".into()]
                )],
                sentinel_auth: vec![(Some("rd".into()), "s3cret".into())],
                redis_partial_reads: vec![Some("rd".into())],
            }
        );
    }
}
