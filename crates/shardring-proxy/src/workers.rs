//! How many threads the proxy runs on, and the runtime that runs them.
//!
//! A proxy on a small machine shares its cores with its servers, its clients and the kernel's loopback
//! and network work, which is most of a proxy's cost (85–90 % of CPU is in the kernel, measured here).
//! There, one thread wins: no work stealing, no cross-thread wake-ups between a client's task and its
//! server connections' tasks, and larger write batches (`BENCHMARKS.md`, proxy section: one thread costs
//! 0.75–0.87× the CPU per request of one worker per CPU on 2 cores, with better p99 in every cell). With
//! cores to spare, more threads serve more requests.
//!
//! The rule ([`default_workers`]): up to 4 CPUs, one thread; above, half the CPUs (the other half is
//! left to the kernel's network work and the neighbours), at most 32. CPUs are counted as
//! [`std::thread::available_parallelism`] counts them, so cgroup quotas and CPU affinity (containers,
//! `taskset`) are taken into account. `shardring proxy --threads N` overrides it.

use std::io;
use std::num::NonZeroUsize;

/// The CPUs at or below which the proxy runs on one thread.
pub const SMALL_MACHINE_CPUS: usize = 4;

/// The most worker threads the default picks.
pub const MAX_DEFAULT_WORKERS: usize = 32;

/// The default number of worker threads on a machine with `cpus` CPUs available.
pub fn default_workers(cpus: usize) -> usize {
    if cpus <= SMALL_MACHINE_CPUS {
        1
    } else {
        (cpus / 2).min(MAX_DEFAULT_WORKERS)
    }
}

/// The CPUs this process may use (1 when that cannot be told).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// A tokio runtime with `workers` threads: a current-thread runtime for one (everything on the calling
/// thread), a multi-threaded one otherwise.
///
/// # Errors
/// When the runtime cannot be started (threads, the I/O driver).
pub fn runtime(workers: usize) -> io::Result<tokio::runtime::Runtime> {
    if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_machines_get_one_thread_and_large_ones_half_their_cpus() {
        for cpus in 0..=4 {
            assert_eq!(default_workers(cpus), 1, "{cpus} cpus");
        }
        assert_eq!(default_workers(6), 3);
        assert_eq!(default_workers(8), 4);
        assert_eq!(default_workers(64), 32);
        assert_eq!(default_workers(256), 32);
    }

    #[test]
    fn one_worker_is_a_current_thread_runtime() {
        let rt = runtime(1).unwrap();
        assert_eq!(
            rt.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::CurrentThread
        );
        let rt = runtime(2).unwrap();
        assert_eq!(
            rt.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        );
    }
}
