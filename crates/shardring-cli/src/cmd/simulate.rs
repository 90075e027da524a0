//! `shardring simulate`: replay synthetic traffic against a ring, round by round, with the adaptive
//! rebalancer and/or bounded loads, and print what each round did as JSON.

use std::io::Write as _;

use anyhow::Context as _;
use shardring::rebalance::{RebalanceOutcome, RebalancerBuilder};
use shardring::simulate::{self, NodeRound, RoundReport, SimulationBuilder, Workload};

/// Replay a synthetic workload against a ring and print one JSON object per round.
///
/// The output is a JSON array written one round per line, each with `round`, `peak_to_mean`,
/// `imbalance`, `max_node`, `min_node`, each node's `points` and `requests`, and (with `--rebalance`)
/// what the rebalancer did after the round.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which keys requests ask for: `uniform`, or `zipf:S` with S > 0 (e.g. `zipf:1.1`).
    #[arg(long, default_value = "uniform", value_parser = parse_workload)]
    workload: Workload,
    /// Nodes in the ring, named node-0, node-1, ….
    #[arg(long, default_value_t = simulate::DEFAULT_NODES as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    nodes: u64,
    /// Points per node at the start.
    #[arg(long, default_value_t = shardring::ring::DEFAULT_VNODES,
          value_parser = clap::value_parser!(u32).range(1..))]
    vnodes: u32,
    /// Requests per round.
    #[arg(long, default_value_t = simulate::DEFAULT_REQUESTS,
          value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Rounds to play.
    #[arg(long, default_value_t = simulate::DEFAULT_ROUNDS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    rounds: u64,
    /// Distinct keys requests are drawn from (key:0 … key:{keys-1}).
    #[arg(long, default_value_t = simulate::DEFAULT_KEYS,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 27)))]
    keys: u64,
    /// Seed of the request generator; the same seed gives the same output.
    #[arg(long, default_value_t = simulate::DEFAULT_SEED)]
    seed: u64,
    /// Run the adaptive virtual-node rebalancer after every round (library defaults: threshold 0.25,
    /// at least 1000 samples, points within [vnodes/4, 4 × vnodes], damping 0.5).
    #[arg(long)]
    rebalance: bool,
    /// With --rebalance: the imbalance (max |load - mean| / mean) above which it acts [default: 0.25].
    #[arg(long, requires = "rebalance", value_parser = parse_threshold)]
    threshold: Option<f64>,
    /// With --rebalance: points are multiplied by (mean / load)^DAMPING, in (0, 1] [default: 0.5].
    #[arg(long, requires = "rebalance", value_parser = parse_damping)]
    damping: Option<f64>,
    /// With --rebalance: the fewest points a node is given [default: vnodes / 4, at least 1].
    #[arg(long, requires = "rebalance", value_parser = clap::value_parser!(u32).range(1..))]
    min_points: Option<u32>,
    /// With --rebalance: the most points a node is given [default: 4 × vnodes].
    #[arg(long, requires = "rebalance", value_parser = clap::value_parser!(u32).range(1..))]
    max_points: Option<u32>,
    /// With --rebalance: requests counted before it judges [default: 1000].
    #[arg(long, requires = "rebalance")]
    min_samples: Option<u64>,
    /// Bound every node's load to C × the average (consistent hashing with bounded loads, C >= 1).
    #[arg(long, value_name = "C", value_parser = parse_factor)]
    bounded: Option<f64>,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse().map_err(|e: shardring::Error| e.to_string())
}

fn parse_threshold(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!("{s:?} is not a number of at least 0")),
    }
}

fn parse_damping(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d > 0.0 && d <= 1.0 => Ok(d),
        _ => Err(format!("{s:?} is not a number in (0, 1]")),
    }
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(c) if c.is_finite() && c >= 1.0 => Ok(c),
        _ => Err(format!("{s:?} is not a number of at least 1")),
    }
}

/// Runs the simulation and prints its rounds.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut builder = SimulationBuilder::new()
        .workload(args.workload)
        .nodes(args.nodes as usize)
        .vnodes(args.vnodes)
        .requests(args.requests)
        .rounds(args.rounds as usize)
        .keys(args.keys)
        .seed(args.seed);
    if args.rebalance {
        let mut settings = RebalancerBuilder::new();
        if let Some(t) = args.threshold {
            settings = settings.threshold(t);
        }
        if let Some(d) = args.damping {
            settings = settings.damping(d);
        }
        if let Some(p) = args.min_points {
            settings = settings.min_points(p as usize);
        }
        if let Some(p) = args.max_points {
            settings = settings.max_points(p as usize);
        }
        if let Some(n) = args.min_samples {
            settings = settings.min_samples(n);
        }
        builder = builder.rebalance(settings);
    }
    if let Some(c) = args.bounded {
        builder = builder.bounded(c);
    }
    let simulation = builder.build().context("invalid simulation settings")?;

    // Every round is played before anything is printed, so that an error leaves stdout empty.
    let rounds = simulation.run()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(out, "[")?;
    for (i, report) in rounds.iter().enumerate() {
        let comma = if i + 1 < rounds.len() { "," } else { "" };
        writeln!(out, "{}{comma}", round_json(report))?;
    }
    writeln!(out, "]")?;
    out.flush()?;
    Ok(())
}

/// One round as printed: fields in this order, nodes in ring order.
#[derive(serde::Serialize)]
struct RoundJson<'a> {
    round: usize,
    peak_to_mean: f64,
    imbalance: f64,
    max_node: &'a str,
    min_node: &'a str,
    points: NodeMap<'a>,
    requests: NodeMap<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rebalance: Option<&'static str>,
}

/// A JSON object from node name to one number per node, in the nodes' order (serde_json would sort a
/// map's keys, putting node-10 before node-2).
struct NodeMap<'a> {
    nodes: &'a [NodeRound],
    value: fn(&NodeRound) -> u64,
}

impl serde::Serialize for NodeMap<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.nodes.iter().map(|n| (&n.name, (self.value)(n))))
    }
}

/// One round as one line of JSON.
fn round_json(report: &RoundReport) -> String {
    let row = RoundJson {
        round: report.round,
        peak_to_mean: report.stats.peak_to_mean,
        imbalance: report.stats.imbalance,
        max_node: report.max_node(),
        min_node: report.min_node(),
        points: NodeMap {
            nodes: &report.nodes,
            value: |n| n.points as u64,
        },
        requests: NodeMap {
            nodes: &report.nodes,
            value: |n| n.requests,
        },
        rebalance: report.rebalance.as_ref().map(|outcome| match outcome {
            RebalanceOutcome::TooFewSamples { .. } => "too-few-samples",
            RebalanceOutcome::Balanced { .. } => "balanced",
            RebalanceOutcome::AtBounds { .. } => "at-bounds",
            RebalanceOutcome::Rebalanced { .. } => "rebalanced",
            _ => "other",
        }),
    };
    serde_json::to_string(&row).expect("numbers and strings always serialise")
}
