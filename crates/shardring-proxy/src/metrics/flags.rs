//! The metrics listener's flag (`--metrics-addr`): where what nutcracker's stats JSON has no place
//! for is served over HTTP ([`super::serve_http`]). nutcracker's own stats port (`-s`, `-a`) is the
//! CLI's, with nutcracker's command line.

/// The HTTP listener of `/metrics`, `/hotkeys` and `/command-latency`. [`Default`]: none given, no
/// listener.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct MetricsFlags {
    /// Serve Prometheus text at http://HOST:PORT/metrics, and JSON at /hotkeys (the hot keys,
    /// --hot-keys) and /command-latency (each Redis command's latency), which nutcracker's stats JSON
    /// has no place for.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}
