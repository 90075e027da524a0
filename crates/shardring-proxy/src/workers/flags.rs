//! The workers' flag (`--threads`): how many worker threads serve clients, when the default for the
//! machine's CPUs ([`super::default_workers`]) is not wanted.

use super::{available_cpus, default_workers};

/// How many workers serve clients. [`Default`]: none given, the default for this machine.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct WorkerFlags {
    /// Worker threads, each accepting and serving its own clients with its own server connections (N
    /// workers open N × server_connections connections to each server). By default: one on a machine
    /// with up to 4 CPUs (everything on one thread, as nutcracker runs: the least CPU per request when
    /// the proxy shares a small machine with its servers and clients), else half the CPUs, at most 32
    /// (CPUs as cgroup quotas and affinity allow).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
}

impl WorkerFlags {
    /// The workers to start: `--threads`, else the default for the CPUs this process may use. More
    /// than those CPUs are started as asked, with a warning in the log: they take turns on the CPUs.
    pub fn workers(&self) -> usize {
        let cpus = available_cpus();
        let workers = self
            .threads
            .map_or_else(|| default_workers(cpus), usize::from);
        if workers > cpus {
            tracing::warn!(
                workers,
                cpus,
                "more worker threads than CPUs: they take turns on the CPUs, adding latency and no \
                 throughput (leave --threads out for the default)"
            );
        }
        workers
    }
}
