//! Compares every placement algorithm at 10, 100 and 1000 nodes: balance, keys moved when one node is
//! added and when a middle node is removed (against the ideal 1/(N+1) and 1/N), lookup memory, build
//! time and lookup time. Prints a Markdown table.
//!
//! ```sh
//! cargo run --release -p shardring --example compare            # 1,000,000 keys
//! cargo run --release -p shardring --example compare -- 300000  # another key count
//! cargo run --release -p shardring --example compare -- --jump-only  # jump vs JumpBackHash only
//! ```
//!
//! Keys are `analysis::KeySet::synthetic` (`key:0`, `key:1`, …), made before any timing starts. Nodes
//! are named `node-0`, `node-1`, …; the added node is `node-N` and the removed one `node-(N/2)`.
//! Build time is the best of 5 builds; lookup time is the best of 3 passes over all keys, divided by
//! the key count, so it includes hashing the key.

use std::hint::black_box;
use std::time::{Duration, Instant};

use shardring::algo::{build, jump_back_hash, jump_hash, Algorithm, AlgorithmOptions};
use shardring::analysis::{movement, spread, KeySet};
use shardring::Node;

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let value = f();
        best = best.min(start.elapsed());
        last = Some(value);
    }
    (best, last.expect("runs > 0"))
}

fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / (1 << 10) as f64)
    } else {
        format!("{n} B")
    }
}

fn human_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn main() -> Result<(), shardring::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let key_count: usize = args
        .iter()
        .find_map(|s| s.replace('_', "").parse().ok())
        .unwrap_or(1_000_000);
    // `--jump-only` skips the big table and times jump against JumpBackHash.
    let jump_only = args.iter().any(|a| a == "--jump-only");
    let keys = KeySet::synthetic(key_count);
    let options = AlgorithmOptions::default();
    println!("{key_count} keys (`key:0` …), default options (xxh3; ring 160 points per node; maglev table next prime >= max(100 N, 65537); multiprobe 21 probes; anchor capacity 2 N)\n");
    println!("| nodes | algorithm | peak/mean | stddev % | moved on add (ideal) | moved on remove (ideal) | memory | build | lookup |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let sizes: &[usize] = if jump_only { &[] } else { &[10, 100, 1000] };
    for &n in sizes {
        let nodes: Vec<Node> = (0..n)
            .map(|i| Node::new(format!("node-{i}")))
            .collect::<Result<_, _>>()?;
        for &algorithm in Algorithm::ALL {
            let (build_time, placement) = best_of(5, || build(algorithm, &nodes, &options));
            let placement = placement?;
            let s = spread(placement.as_ref(), &keys);

            let mut added = placement.clone();
            added.add(Node::new(format!("node-{n}"))?)?;
            let on_add = movement(placement.as_ref(), added.as_ref(), &keys).fraction();

            let mut removed = placement.clone();
            removed.remove(&format!("node-{}", n / 2))?;
            let on_remove = movement(placement.as_ref(), removed.as_ref(), &keys).fraction();

            let (lookup_time, _) = best_of(3, || {
                let mut sum = 0usize;
                for key in keys.iter() {
                    sum =
                        sum.wrapping_add(black_box(placement.locate(black_box(key))).unwrap_or(0));
                }
                black_box(sum)
            });
            let lookup_ns = lookup_time.as_secs_f64() * 1e9 / key_count as f64;

            println!(
                "| {n} | {algorithm} | {:.3} | {:.2} | {:.4} ({:.4}) | {:.4} ({:.4}) | {} | {} | {:.0} ns |",
                s.peak_to_mean,
                s.stddev_percent(),
                on_add,
                1.0 / (n as f64 + 1.0),
                on_remove,
                1.0 / n as f64,
                human_bytes(placement.memory_bytes()),
                human_duration(build_time),
                lookup_ns,
            );
        }
    }
    // JumpBackHash joins the algorithms only if it beats jump: time both bare functions on the same
    // pre-hashed keys.
    println!("\n| buckets | jump ns/call | jumpback ns/call |");
    println!("|---:|---:|---:|");
    let hashes: Vec<u64> = keys.iter().map(shardring::hash::xxh3_64).collect();
    for n in [10u32, 100, 1000, 100_000, 10_000_000] {
        let time = |f: fn(u64, u32) -> Option<u32>| {
            best_of(5, || {
                let mut sum = 0u64;
                for &h in &hashes {
                    sum = sum.wrapping_add(u64::from(black_box(f(black_box(h), n)).unwrap_or(0)));
                }
                black_box(sum)
            })
            .0
            .as_secs_f64()
                * 1e9
                / hashes.len() as f64
        };
        println!(
            "| {n} | {:.1} | {:.1} |",
            time(jump_hash),
            time(jump_back_hash)
        );
    }
    Ok(())
}
