//! `shardring lookup`: where do these keys live?

use std::ffi::OsString;
use std::io::{self, BufRead, BufWriter, Write};

use anyhow::{bail, Context, Result};
use shardring::algo::{self, Algorithm, AlgorithmOptions};
use shardring::{HashFunction, Placement};

use crate::nodes::parse_node_list;

/// Keys come from the arguments, or one per line on stdin (a trailing `\r` is dropped); output is
/// `KEY<TAB>NODE[<TAB>NODE...]` per key in input order.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keys to look up (raw bytes). Without any, keys are read from stdin, one per line.
    keys: Vec<OsString>,
    /// The nodes: NAME or NAME=WEIGHT, comma-separated (e.g. `10.0.0.1:11211=2,10.0.0.2:11211`).
    #[arg(long)]
    nodes: String,
    /// Print this many distinct nodes per key, the owner first.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// The placement algorithm.
    #[arg(long, default_value = "ring")]
    algo: String,
    /// The key hash (xxh3, crc32, fnv1-32, fnv1a-32, fnv1-64, fnv1a-64, murmur3, md5).
    #[arg(long, default_value = "xxh3")]
    hash: String,
    /// Ring points per node of weight 1.
    #[arg(long, default_value_t = 160)]
    vnodes: u32,
}

pub fn run(args: Args) -> Result<()> {
    if args.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    let placement = build(&args)?;
    let stdout = io::stdout().lock();
    let mut out = BufWriter::new(stdout);
    let mut replicas = Vec::with_capacity(args.replicas);
    let mut print = |key: &[u8]| -> io::Result<()> {
        placement.replicas_into(key, args.replicas, &mut replicas);
        out.write_all(key)?;
        for &i in &replicas {
            out.write_all(b"\t")?;
            out.write_all(placement.nodes()[i].name().as_bytes())?;
        }
        out.write_all(b"\n")
    };
    if args.keys.is_empty() {
        let stdin = io::stdin().lock();
        for line in stdin.split(b'\n') {
            let mut key = line.context("reading keys from stdin")?;
            if key.last() == Some(&b'\r') {
                key.pop();
            }
            print(&key)?;
        }
    } else {
        for key in &args.keys {
            print(os_bytes(key))?;
        }
    }
    out.flush()?;
    Ok(())
}

fn build(args: &Args) -> Result<Box<dyn Placement>> {
    let nodes = parse_node_list(&args.nodes)?;
    let algorithm: Algorithm = args.algo.parse()?;
    let mut options = AlgorithmOptions::default();
    options.hash = args.hash.parse::<HashFunction>()?;
    options.vnodes = args.vnodes;
    Ok(algo::build(algorithm, &nodes, &options)?)
}

#[cfg(unix)]
fn os_bytes(s: &OsString) -> &[u8] {
    std::os::unix::ffi::OsStrExt::as_bytes(s.as_os_str())
}

#[cfg(not(unix))]
fn os_bytes(s: &OsString) -> &[u8] {
    s.as_encoded_bytes()
}
