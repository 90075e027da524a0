//! Concurrent lookups on a [`SharedRing`] against a `RwLock<Ring>` baseline, with a writer publishing
//! 100 membership changes a second throughout; and the cost of the load counters per lookup.
//!
//! Keys are made before any timed loop. Multi-threaded cases use `iter_custom`: the iterations are split
//! between the reader threads and the time is from their common start to the last one's end, so the
//! reported throughput is lookups per second over all threads together. The `-cpu` variants report the
//! longest reader's on-CPU time instead (see [`Clock::Cpu`]), for machines whose cores are shared.

// criterion_group! generates an undocumented public function; the lint cannot be scoped to it.
#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented public functions"
)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, RwLock};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    black_box, criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use shardring::load::LoadCounters;
use shardring::shared::SharedRing;
use shardring::{Node, Ring};

/// Nodes in the benchmarked ring (× 160 points).
const NODES: usize = 10;
/// Membership changes per second published by the writer.
const CHANGES_PER_SECOND: u64 = 100;

fn ring() -> Ring {
    Ring::builder()
        .nodes((0..NODES).map(|i| format!("10.0.0.{i}:11211")))
        .build()
        .unwrap()
}

/// A fixed pool of pseudo-random 16-byte keys (SplitMix64 over a fixed seed).
fn keys(count: usize) -> Vec<[u8; 16]> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..count)
        .map(|_| {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&next().to_le_bytes());
            k[8..].copy_from_slice(&next().to_le_bytes());
            k
        })
        .collect()
}

/// Runs `change` `CHANGES_PER_SECOND` times a second on its own thread until the returned guard drops.
struct Writer {
    /// Tells the writer thread to stop.
    stop: &'static AtomicBool,
    /// The writer thread.
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Writer {
    fn start(mut change: impl FnMut(u64) + Send + 'static) -> Writer {
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let thread = std::thread::spawn(move || {
            let period = Duration::from_nanos(1_000_000_000 / CHANGES_PER_SECOND);
            let mut next = Instant::now();
            let mut changes = 0;
            // Relaxed: the flag carries no data, it only ends the loop.
            while !stop.load(Ordering::Relaxed) {
                change(changes);
                changes += 1;
                next += period;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            changes
        });
        Writer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let changes = t.join().unwrap();
            eprintln!("writer published {changes} changes");
        }
    }
}

/// This thread's time on a CPU so far (`CLOCK_THREAD_CPUTIME_ID`, nanosecond resolution).
fn thread_cpu_time() -> Duration {
    cpu_time::ThreadTime::now().as_duration()
}

/// Which clock a multi-threaded case reports.
#[derive(Clone, Copy)]
enum Clock {
    /// Wall time from the common start to the last thread's end: the throughput actually had.
    Wall,
    /// The longest on-CPU time of any reader thread: the wall time the run would take if every reader had
    /// a core to itself. On a machine whose cores are busy with other work, this shows whether the readers
    /// slow *each other* down, which wall time cannot. It is optimistic about contention: readers that
    /// were not scheduled at the same moment did not contend.
    Cpu,
}

/// Times `iters` calls of `lookup` split over `threads` threads started together, on `clock`.
fn run_threads_on(
    clock: Clock,
    threads: usize,
    iters: u64,
    lookup: &(impl Fn(usize) + Sync),
) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let per_thread = iters / threads as u64;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let cpu = thread_cpu_time();
                    let mut i = t * 1024;
                    for _ in 0..per_thread {
                        i = (i + 1) & 4095;
                        lookup(i);
                    }
                    thread_cpu_time().saturating_sub(cpu)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let cpu = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap_or_default();
        match clock {
            Clock::Wall => start.elapsed(),
            Clock::Cpu => cpu,
        }
    })
}

/// One benchmark of `lookup` run on `threads` threads with `clock`, named `{name}{suffix}/{threads}`.
fn bench_threads(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    (clock, suffix): (Clock, &str),
    threads: usize,
    lookup: &(impl Fn(usize) + Sync),
) {
    group.bench_with_input(
        BenchmarkId::new(format!("{name}{suffix}"), threads),
        &threads,
        |b, &threads| b.iter_custom(|iters| run_threads_on(clock, threads, iters, lookup)),
    );
}

fn shared_vs_rwlock(c: &mut Criterion) {
    let pool = keys(4096);
    let mut group = c.benchmark_group("shared/lookup-while-writing");
    group.throughput(Throughput::Elements(1));

    let shared: &'static SharedRing = Box::leak(Box::new(SharedRing::new(ring())));
    let locked: &'static RwLock<Ring> = Box::leak(Box::new(RwLock::new(ring())));
    let extra = || Node::new("10.0.1.0:11211").unwrap();
    // Both writers alternately add and remove one node. The shared ring builds the next ring beside the
    // current one; the RwLock baseline changes the ring in place under the write lock, as a lock-based
    // ring does.
    let _shared_writer = Writer::start(move |n| {
        if n % 2 == 0 {
            shared.add(extra()).unwrap();
        } else {
            shared.remove("10.0.1.0:11211").unwrap();
        }
    });
    let _locked_writer = Writer::start(move |n| {
        let mut ring = locked.write().unwrap();
        if n % 2 == 0 {
            ring.add_node(extra()).unwrap();
        } else {
            ring.remove("10.0.1.0:11211").unwrap();
        }
    });

    for (clock, suffix) in [(Clock::Wall, ""), (Clock::Cpu, "-cpu")] {
        for threads in [1usize, 2] {
            bench_threads(&mut group, "arc-swap", (clock, suffix), threads, &|i| {
                black_box(shared.load().lookup(black_box(&pool[i])));
            });
            bench_threads(&mut group, "rwlock", (clock, suffix), threads, &|i| {
                black_box(locked.read().unwrap().lookup(black_box(&pool[i])));
            });
        }
    }
    group.finish();
}

fn load_counters(c: &mut Criterion) {
    let pool = keys(4096);
    let mut group = c.benchmark_group("shared/load-counters");
    group.throughput(Throughput::Elements(1));
    let shared = SharedRing::new(ring());
    let one_stripe = LoadCounters::with_stripes(NODES, 1);

    for (clock, suffix) in [(Clock::Wall, ""), (Clock::Cpu, "-cpu")] {
        for threads in [1usize, 2] {
            bench_threads(&mut group, "uncounted", (clock, suffix), threads, &|i| {
                black_box(shared.load().lookup(black_box(&pool[i])));
            });
            bench_threads(&mut group, "striped", (clock, suffix), threads, &|i| {
                black_box(shared.load().lookup_counted(black_box(&pool[i])));
            });
            // The naive alternative: one shared row of counters that every thread writes.
            bench_threads(&mut group, "one-stripe", (clock, suffix), threads, &|i| {
                let snapshot = shared.load();
                if let Some(n) = snapshot.lookup_index(black_box(&pool[i])) {
                    one_stripe.record(n);
                }
            });
        }
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = shared_vs_rwlock, load_counters
}
criterion_main!(benches);
