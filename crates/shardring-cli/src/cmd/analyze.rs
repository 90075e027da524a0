//! `shardring analyze`: the README's main job. Every algorithm on the same synthetic keys.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use shardring::algo::{self, Algorithm, AlgorithmOptions};
use shardring::analysis::{self, KeySet, Report};
use shardring::{HashFunction, Node};

use crate::plot;

/// Builds each algorithm over `node-0 … node-(N-1)`, places `key:0 … key:(K-1)`, then adds `node-N` and
/// removes the middle node to count the keys that move.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The algorithm to measure, or `all`.
    #[arg(long, default_value = "all")]
    algo: String,
    /// How many nodes.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Ring points per node (for the ring).
    #[arg(long, default_value_t = 160)]
    vnodes: u32,
    /// The ring keeps a line table (`RingBuilder::line_table`): one cache miss a lookup, for 8 to 16
    /// more bytes a point.
    #[arg(long)]
    line_table: bool,
    /// How many keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// The key hash.
    #[arg(long, default_value = "xxh3")]
    hash: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also draw each node's load against the mean, per algorithm, as an SVG file (the name must end
    /// in .svg: another name is refused before the analysis runs).
    #[arg(long, value_name = "FILE.svg", value_parser = plot::svg_path)]
    plot: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Json,
}

/// The most nodes `analyze` builds: past the ring's default point limit at 160 points each anyway.
const MAX_NODES: usize = 1_000_000;
/// The most keys `analyze` places: about 1.5 GiB of key bytes.
const MAX_KEYS: usize = 100_000_000;

/// One row of the JSON output (DESIGN §3.1).
#[derive(Debug, Serialize)]
struct Row {
    algorithm: &'static str,
    hash: String,
    nodes: usize,
    vnodes: u32,
    keys: usize,
    mean: f64,
    stddev: f64,
    stddev_percent: f64,
    min: u64,
    max: u64,
    peak_to_mean: f64,
    moved_on_add: f64,
    ideal_on_add: f64,
    add_moved_only_to_new: bool,
    moved_on_remove: f64,
    ideal_on_remove: f64,
    remove_moved_only_its_keys: bool,
    build_ms: f64,
    lookup_ns: f64,
    lookup_batch_ns: f64,
    /// Which keys the lookup columns time (one pass of the analysis keys).
    lookup_pool: &'static str,
    memory_bytes: usize,
}

pub fn run(args: Args) -> Result<()> {
    if !(1..=MAX_NODES).contains(&args.nodes) {
        bail!("--nodes must be between 1 and {MAX_NODES}");
    }
    if !(1..=MAX_KEYS).contains(&args.keys) {
        bail!("--keys must be between 1 and {MAX_KEYS}");
    }
    let algorithms: Vec<Algorithm> = if args.algo.eq_ignore_ascii_case("all") {
        Algorithm::ALL.to_vec()
    } else {
        vec![args.algo.parse()?]
    };
    let mut options = AlgorithmOptions::default();
    options.hash = args.hash.parse::<HashFunction>()?;
    options.vnodes = args.vnodes;
    options.line_table = args.line_table;
    if options.vnodes == 0 {
        bail!("--vnodes must be at least 1");
    }
    let nodes = (0..args.nodes)
        .map(|i| Node::new(format!("node-{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let added = Node::new(format!("node-{}", args.nodes))?;

    let progress = progress_bar(algorithms.len() as u64 + 1);
    progress.set_message("making keys");
    let keys = KeySet::synthetic(args.keys);
    progress.inc(1);

    let mut reports = Vec::with_capacity(algorithms.len());
    for &algorithm in &algorithms {
        progress.set_message(algorithm.name());
        let build = |nodes: &[Node]| algo::build(algorithm, nodes, &options);
        reports.push(analysis::report(build, &nodes, added.clone(), &keys)?);
        progress.inc(1);
    }
    progress.finish_and_clear();

    if let Some(path) = &args.plot {
        plot::loads(path, &reports)?;
    }
    let rows: Vec<Row> = reports
        .iter()
        .map(|r| row(r, &args, options.hash))
        .collect();
    let mut out = io::stdout().lock();
    match args.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &rows)?;
            writeln!(out)?;
        }
        Format::Table => print_table(&mut out, &rows, &args)?,
    }
    out.flush()?;
    Ok(())
}

fn progress_bar(steps: u64) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

fn row(r: &Report, args: &Args, hash: HashFunction) -> Row {
    Row {
        algorithm: r.algorithm,
        hash: hash.to_string(),
        nodes: r.nodes,
        vnodes: args.vnodes,
        keys: r.keys,
        mean: r.spread.mean,
        stddev: r.spread.stddev,
        stddev_percent: r.spread.stddev_percent(),
        min: r.spread.min,
        max: r.spread.max,
        peak_to_mean: r.spread.peak_to_mean,
        moved_on_add: r.moved_on_add,
        ideal_on_add: r.ideal_on_add,
        add_moved_only_to_new: r.add_moved_only_to_new,
        moved_on_remove: r.moved_on_remove,
        ideal_on_remove: r.ideal_on_remove,
        remove_moved_only_its_keys: r.remove_moved_only_its_keys,
        build_ms: r.build_time.as_secs_f64() * 1e3,
        lookup_ns: r.lookup_ns,
        lookup_batch_ns: r.lookup_batch_ns,
        lookup_pool: LOOKUP_POOL,
        memory_bytes: r.memory_bytes,
    }
}

/// What the lookup columns measure, in the JSON's `lookup_pool`.
const LOOKUP_POOL: &str = "cold: one pass over the analysis keys, each key read once";

fn print_table(out: &mut impl Write, rows: &[Row], args: &Args) -> io::Result<()> {
    writeln!(
        out,
        "{} nodes, {} keys, hash {}, {} points per node for the ring",
        args.nodes, args.keys, args.hash, args.vnodes
    )?;
    writeln!(
        out,
        "{:<12} {:>9} {:>8} {:>9} {:>9} {:>16} {:>16} {:>10} {:>16} {:>15} {:>10}",
        "algorithm",
        "peak/mean",
        "stddev%",
        "min/mean",
        "max/mean",
        "moved on add",
        "moved on remove",
        "build ms",
        "lookup ns (cold)",
        "batch ns (cold)",
        "memory"
    )?;
    for r in rows {
        let ratio = |x: u64| if r.mean > 0.0 { x as f64 / r.mean } else { 0.0 };
        let moved = |moved: f64, ideal: f64, clean: bool| {
            format!(
                "{:.4} ({:.2}x){}",
                moved,
                if ideal > 0.0 { moved / ideal } else { 0.0 },
                if clean { "" } else { "!" }
            )
        };
        writeln!(
            out,
            "{:<12} {:>9.4} {:>8.2} {:>9.4} {:>9.4} {:>16} {:>16} {:>10.2} {:>16.1} {:>15.1} {:>10}",
            r.algorithm,
            r.peak_to_mean,
            r.stddev_percent,
            ratio(r.min),
            ratio(r.max),
            moved(r.moved_on_add, r.ideal_on_add, r.add_moved_only_to_new),
            moved(
                r.moved_on_remove,
                r.ideal_on_remove,
                r.remove_moved_only_its_keys
            ),
            r.build_ms,
            r.lookup_ns,
            r.lookup_batch_ns,
            human_bytes(r.memory_bytes)
        )?;
    }
    writeln!(
        out,
        "moved: fraction of keys (× the ideal 1/(N+1) on add, 1/N on remove); ! = some keys moved between \
         nodes that were not added or removed"
    )?;
    writeln!(
        out,
        "lookup ns (cold): mean single lookup over one pass of the {} keys (a cold key pool: each key read once; the \
         placement stays cached only if its memory fits the CPU caches); batch ns (cold): the same keys placed \
         {} at a time (Placement::locate_many)",
        args.keys,
        shardring::analysis::PLACE_BATCH
    )
}

fn human_bytes(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}
