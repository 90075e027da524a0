//! How many threads serve clients, and the threads themselves: thread per core, as Envoy and mcrouter
//! run.
//!
//! Each worker is an OS thread with its own current-thread tokio runtime. A worker accepts clients
//! from every pool's listener (the same listening socket, registered in each worker's runtime) and
//! serves each client entirely on its thread: the client's session and the server connections it
//! sends to are tasks of the same runtime, so a request crosses no thread on its way to a server and
//! back. For that, each worker has its own connections to every server: W workers open W ×
//! `server_connections` connections to each server (Envoy's per-worker upstream pools). What is shared
//! across workers stays shared: each pool's config snapshot (arc-swap), its routing, every server's
//! health and ejection, and the tallies. The control plane (stats listeners, reload, health probes,
//! etcd) runs on the thread that called [`crate::run`], in its own runtime.
//!
//! The previous multi-worker mode, one tokio multi-thread runtime, let a client's task and its server
//! connections' tasks run on different threads, so each request crossed threads twice, with work
//! stealing and cross-thread wake-ups on top (`BENCHMARKS.md`, "proxy: a per-thread data path").
//!
//! Why one shared listening socket rather than one `SO_REUSEPORT` socket per worker: the proxy, not a
//! hash of the client's address, decides which worker takes a client (the least loaded one:
//! [`crate::Admission`]; left to the kernel's wake-ups, one worker took every client of a burst); closing
//! one worker's socket cannot drop clients queued on it; and it works for unix-socket listeners, which
//! have no `SO_REUSEPORT`. The kernel wakes every waiting worker for a new client, but clients connect
//! rarely (they keep their connections), so the extra wake-ups cost little.
//!
//! How many ([`default_workers`]): a proxy on a small machine shares its cores with its servers, its
//! clients and the kernel's loopback and network work, which is most of a proxy's cost (most of its
//! CPU time is spent in the kernel). There, one worker wins: every syscall is the proxy's own
//! thread's, and write batches are largest (`BENCHMARKS.md`, proxy section). With cores to spare, more
//! workers serve more requests. The rule: up to 4 CPUs, one worker; above, half the CPUs (the other
//! half is left to the kernel's network work and the neighbours), at most 32. CPUs are counted as
//! [`std::thread::available_parallelism`] counts them, so cgroup quotas and CPU affinity (containers,
//! `taskset`) are taken into account. `shardring proxy --threads N` overrides it
//! ([`crate::flags::WorkerFlags`], [`crate::RunOptions::workers`]).
//!
//! One worker is the calling thread's runtime itself ([`Workers::current`]): no thread is started,
//! and the control plane shares the thread, as it always did.

pub(crate) mod flags;

use std::io;
use std::num::NonZeroUsize;
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The CPUs at or below which the proxy runs one worker.
pub const SMALL_MACHINE_CPUS: usize = 4;

/// The most workers the default picks.
pub const MAX_DEFAULT_WORKERS: usize = 32;

/// The default number of workers on a machine with `cpus` CPUs available.
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

/// The runtime the control plane runs on (and the one worker, when there is one): a current-thread
/// runtime on the calling thread.
///
/// # Errors
/// When the runtime cannot be started (the I/O driver).
pub fn control_runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// The threads that serve clients: each a current-thread runtime, known by its [`Handle`]. Dropping
/// it stops the threads it started (their remaining tasks are dropped) and waits for them.
#[derive(Debug)]
pub struct Workers {
    /// Each worker's runtime, by worker index: where its accept loops and server connections are
    /// spawned.
    handles: Vec<Handle>,
    /// The threads started for them, with the trigger that ends each; empty for [`Workers::current`].
    threads: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Workers {
    /// One worker: the runtime of the calling thread (must be inside one). Nothing is started.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn current() -> Workers {
        Workers {
            handles: vec![Handle::current()],
            threads: Vec::new(),
        }
    }

    /// `n` worker threads (at least one), named `shardring-worker-<i>`, each running its own
    /// current-thread runtime until this is dropped.
    ///
    /// # Errors
    /// When a thread or its runtime cannot be started; those already started are stopped.
    pub fn start(n: usize) -> io::Result<Workers> {
        let mut workers = Workers {
            handles: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
        };
        for i in 0..n.max(1) {
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("shardring-worker-{i}"))
                .spawn(move || {
                    let runtime = match control_runtime() {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = handle_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = handle_tx.send(Ok(runtime.handle().clone()));
                    // Tasks spawned through the handle run while this waits; a dropped trigger ends it.
                    let _ = runtime.block_on(stop_rx);
                })?;
            let handle = handle_rx
                .recv()
                .map_err(|_| io::Error::other("a worker thread ended before it started"))??;
            workers.handles.push(handle);
            workers.threads.push((stop_tx, thread));
        }
        Ok(workers)
    }

    /// How many workers.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Never: there is at least one worker. (For clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Each worker's runtime, by worker index.
    pub(crate) fn handles(&self) -> &[Handle] {
        &self.handles
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let me = std::thread::current().id();
        for (stop, thread) in self.threads.drain(..) {
            drop(stop);
            // A worker's own task dropping the last reference cannot wait for itself.
            if thread.thread().id() != me {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_machines_get_one_worker_and_large_ones_half_their_cpus() {
        for cpus in 0..=4 {
            assert_eq!(default_workers(cpus), 1, "{cpus} cpus");
        }
        assert_eq!(default_workers(6), 3);
        assert_eq!(default_workers(8), 4);
        assert_eq!(default_workers(64), 32);
        assert_eq!(default_workers(256), 32);
    }

    #[test]
    fn each_worker_is_its_own_thread_with_a_current_thread_runtime() {
        let workers = Workers::start(3).unwrap();
        assert_eq!(workers.len(), 3);
        let mut threads = Vec::new();
        for h in workers.handles() {
            assert_eq!(
                h.runtime_flavor(),
                tokio::runtime::RuntimeFlavor::CurrentThread
            );
            let (tx, rx) = std::sync::mpsc::channel();
            h.spawn(async move {
                let _ = tx.send(std::thread::current().id());
            });
            threads.push(rx.recv().unwrap());
        }
        let distinct: std::collections::HashSet<_> = threads.iter().collect();
        assert_eq!(distinct.len(), 3, "three distinct threads");
        assert!(!threads.contains(&std::thread::current().id()));
    }

    #[tokio::test]
    async fn one_worker_is_the_calling_runtime() {
        let workers = Workers::current();
        assert_eq!(workers.len(), 1);
        let here = std::thread::current().id();
        let there = workers.handles()[0]
            .spawn(async { std::thread::current().id() })
            .await
            .unwrap();
        assert_eq!(here, there);
    }
}
