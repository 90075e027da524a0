//! `shardring lookup`: where do these keys live?

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use shardring::algo::{self, Algorithm, AlgorithmOptions};
use shardring::{HashFunction, Placement};

use crate::compat;
use crate::nodes::parse_node_list;

/// Keys come from the arguments, or one per line on stdin (a trailing `\r` is dropped); output is
/// `KEY<TAB>NODE[<TAB>NODE...]` per key in input order.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keys to look up (raw bytes). Without any (and without --file), keys are read from stdin, one per
    /// line.
    keys: Vec<OsString>,
    /// Read keys from this file, one per line, instead of stdin.
    #[arg(long, value_name = "PATH", conflicts_with = "keys")]
    file: Option<PathBuf>,
    /// The nodes: NAME or NAME=WEIGHT, comma-separated (e.g. `10.0.0.1:11211=2,10.0.0.2:11211`). With
    /// --compat twemproxy or libmemcached*, each NAME is HOST:PORT and weights are whole numbers.
    #[arg(long, required_unless_present = "config")]
    nodes: Option<String>,
    /// Place keys exactly as this twemproxy (nutcracker 0.5.0) configuration file does: its hash,
    /// distribution, hash_tag, weights and server names. Prints the server's name, else host:port.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["nodes", "compat", "algo", "hash", "vnodes"])]
    config: Option<PathBuf>,
    /// The pool of --config to use (needed when the file has several).
    #[arg(long, value_name = "NAME", requires = "config")]
    pool: Option<String>,
    #[command(flatten)]
    compat: compat::CompatArgs,
    /// Print this many distinct nodes per key, the owner first.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// The placement algorithm.
    #[arg(long, default_value = "ring")]
    algo: String,
    /// The key hash (xxh3, crc32, fnv1-32, fnv1a-32, fnv1-64, fnv1a-64, murmur3, md5, or
    /// twemproxy:NAME); xxh3 by default. With --compat, the program's hash names (see there).
    #[arg(long)]
    hash: Option<String>,
    /// Ring points per node of weight 1 (160 by default). With --compat: groupcache's replicas,
    /// spymemcached's node repetitions, a template ring's points.
    #[arg(long)]
    vnodes: Option<u32>,
}

pub fn run(args: Args) -> Result<()> {
    if args.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    let placement = build(&args)?;
    // Open the input before printing anything, so an unreadable file leaves stdout empty.
    let input: Option<Box<dyn BufRead>> = match (&args.file, args.keys.is_empty()) {
        (Some(path), _) => Some(Box::new(BufReader::new(
            File::open(path).with_context(|| format!("opening {}", path.display()))?,
        ))),
        (None, true) => Some(Box::new(io::stdin().lock())),
        (None, false) => None,
    };
    let stdout = io::stdout().lock();
    let mut out = BufWriter::new(stdout);
    let mut replicas = Vec::with_capacity(args.replicas.min(placement.nodes().len()));
    let mut print = |key: &[u8]| -> io::Result<()> {
        placement.replicas_into(key, args.replicas, &mut replicas);
        out.write_all(key)?;
        for &i in &replicas {
            out.write_all(b"\t")?;
            out.write_all(placement.nodes()[i].name().as_bytes())?;
        }
        out.write_all(b"\n")
    };
    if let Some(input) = input {
        let source = match &args.file {
            Some(path) => path.display().to_string(),
            None => "stdin".to_string(),
        };
        for line in input.split(b'\n') {
            let mut key = line.with_context(|| format!("reading keys from {source}"))?;
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
    if let Some(path) = &args.config {
        return compat::from_config(path, args.pool.as_deref());
    }
    if args.pool.is_some() {
        bail!("--pool selects a pool of --config; there is no --config");
    }
    let nodes = parse_node_list(args.nodes.as_deref().unwrap_or_default())?;
    if args.compat.compat.is_some() {
        return compat::from_args(&args.compat, &nodes, args.hash.as_deref(), args.vnodes);
    }
    let algorithm: Algorithm = args.algo.parse()?;
    let mut options = AlgorithmOptions::default();
    options.hash = args
        .hash
        .as_deref()
        .unwrap_or("xxh3")
        .parse::<HashFunction>()?;
    options.vnodes = args.vnodes.unwrap_or(160);
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
