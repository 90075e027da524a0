//! `shardring ring`: the continuum, shares, and migration plans.

use std::io::{self, BufWriter, Write};

use anyhow::{bail, Result};
use shardring::{HashFunction, Node, Ring};

use crate::compat;
use crate::nodes::parse_node_list;

/// Prints `POINT<TAB>NODE` for every point in ring order; with `--shares`, `NODE<TAB>SHARE` (the fraction
/// of the circle each node owns); with `--diff --to-nodes`, the migration plan
/// `FROM_POINT<TAB>TO_POINT<TAB>OLD_NODE<TAB>NEW_NODE`: every hash range `FROM..=TO` whose owner changes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The nodes: NAME or NAME=WEIGHT, comma-separated.
    #[arg(long)]
    nodes: String,
    /// Print each node's share of the circle instead of the points.
    #[arg(long, conflicts_with = "diff")]
    shares: bool,
    /// Print the migration plan from --nodes to --to-nodes.
    #[arg(long, requires = "to_nodes")]
    diff: bool,
    /// The node list after the change (with --diff).
    #[arg(long, requires = "diff")]
    to_nodes: Option<String>,
    /// The key and point hash (xxh3 by default; with --compat, the program's hash names and default).
    #[arg(long)]
    hash: Option<String>,
    /// Build the continuum as this program does (twemproxy, libmemcached, libmemcached-weighted,
    /// libmemcached-spy, libmemcached-spy-weighted, libketama, uhashring, nginx); with --diff, the plan
    /// shows every range that moves under that program's rules, between unchanged servers too.
    #[arg(long, value_name = "MODE", conflicts_with = "vnodes")]
    compat: Option<String>,
    /// Ring points per node of weight 1.
    #[arg(long, default_value_t = 160)]
    vnodes: u32,
}

pub fn run(args: Args) -> Result<()> {
    let build = |list: &str| -> Result<Ring> {
        let nodes = parse_node_list(list)?;
        match &args.compat {
            Some(mode) => compat::ring_from_nodes(mode, &nodes, args.hash.as_deref()),
            None => {
                let hash: HashFunction = args.hash.as_deref().unwrap_or("xxh3").parse()?;
                build(&nodes, hash, args.vnodes)
            }
        }
    };
    let ring = build(&args.nodes)?;
    let to = match (&args.to_nodes, args.diff) {
        (Some(list), true) => Some(build(list)?),
        (None, true) => bail!("--diff needs --to-nodes"),
        _ => None,
    };
    let mut out = BufWriter::new(io::stdout().lock());
    if let Some(to) = to {
        write_ranges(&mut out, &ring.migration_to(&to))?;
    } else if args.shares {
        let mut shares = ring.shares();
        shares.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        for (node, share) in shares {
            writeln!(out, "{}\t{:.6}", node.name(), share)?;
        }
    } else {
        for (point, node) in ring.points() {
            writeln!(out, "{point}\t{}", node.name())?;
        }
    }
    out.flush()?;
    Ok(())
}

fn build(nodes: &[Node], hash: HashFunction, vnodes: u32) -> Result<Ring> {
    let builder = Ring::builder().hash(hash).vnodes(vnodes);
    Ok(nodes
        .iter()
        .fold(builder, |b, n| b.node(n.name(), n.weight()))
        .build()?)
}

/// One line per moving hash range of a migration plan: `FIRST<TAB>LAST<TAB>FROM<TAB>TO`, `-` for no node.
pub(crate) fn write_ranges(
    out: &mut impl Write,
    plan: &[shardring::ring::Migration],
) -> io::Result<()> {
    let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "-".into());
    for m in plan {
        writeln!(
            out,
            "{}\t{}\t{}\t{}",
            m.first,
            m.last,
            name(&m.from),
            name(&m.to)
        )?;
    }
    Ok(())
}
