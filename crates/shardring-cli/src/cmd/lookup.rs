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
    #[arg(long, value_name = "FILE", conflicts_with_all = ["nodes", "compat", "algo", "hash", "vnodes", "line_table"])]
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
    /// `--algo ring` keeps a line table (`RingBuilder::line_table`): one cache miss a lookup, for 8
    /// to 16 more bytes a point. The output is the same either way.
    #[arg(long)]
    line_table: bool,
    /// Keys read and placed at a time (`Placement::locate_many`, which overlaps the keys' cache
    /// misses on a large ring); 1 places each key on its own. The output is the same either way.
    #[arg(long, default_value_t = DEFAULT_BATCH, value_name = "N")]
    batch: usize,
}

/// Keys placed per call by default: enough for the batch to pay, little memory (the keys of one batch
/// are held at once).
const DEFAULT_BATCH: usize = 1024;

pub fn run(args: Args) -> Result<()> {
    if args.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let placement = build(&args)?;
    // Open the input before printing anything, so an unreadable file leaves stdout empty.
    let input: Option<Box<dyn BufRead>> = match (&args.file, args.keys.is_empty()) {
        (Some(path), _) => Some(Box::new(BufReader::with_capacity(
            1 << 16,
            File::open(path).with_context(|| format!("opening {}", path.display()))?,
        ))),
        (None, true) => Some(Box::new(io::stdin().lock())),
        (None, false) => None,
    };
    let stdout = io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, stdout);
    let mut printer = Printer {
        placement: placement.as_ref(),
        replicas: args.replicas,
        found: Vec::with_capacity(args.replicas.min(placement.nodes().len())),
        owners: Vec::new(),
    };
    if let Some(mut input) = input {
        let source = match &args.file {
            Some(path) => path.display().to_string(),
            None => "stdin".to_string(),
        };
        // A batch's keys back to back in `bytes`, each ending where `ends` says.
        let batch = args.batch;
        let mut bytes = Vec::with_capacity(batch * 32);
        let mut ends = Vec::with_capacity(batch);
        loop {
            bytes.clear();
            ends.clear();
            while ends.len() < batch {
                let read = input
                    .read_until(b'\n', &mut bytes)
                    .with_context(|| format!("reading keys from {source}"))?;
                if read == 0 {
                    break;
                }
                if bytes.last() == Some(&b'\n') {
                    bytes.pop();
                }
                if bytes.last() == Some(&b'\r') {
                    bytes.pop();
                }
                ends.push(bytes.len());
            }
            if ends.is_empty() {
                break;
            }
            let keys: Vec<&[u8]> = ends
                .iter()
                .scan(0, |start, &end| {
                    let key = &bytes[*start..end];
                    *start = end;
                    Some(key)
                })
                .collect();
            printer.print(&keys, &mut out)?;
        }
    } else {
        let keys: Vec<&[u8]> = args.keys.iter().map(os_bytes).collect();
        for keys in keys.chunks(args.batch) {
            printer.print(keys, &mut out)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// Writes `KEY<TAB>NODE...` lines for batches of keys.
struct Printer<'a> {
    /// Where keys go.
    placement: &'a dyn Placement,
    /// How many distinct nodes to print per key.
    replicas: usize,
    /// One key's replicas (reused).
    found: Vec<usize>,
    /// A batch's owners (reused).
    owners: Vec<Option<usize>>,
}

impl Printer<'_> {
    fn print(&mut self, keys: &[&[u8]], out: &mut impl Write) -> io::Result<()> {
        let nodes = self.placement.nodes();
        if self.replicas > 1 {
            for &key in keys {
                self.placement
                    .replicas_into(key, self.replicas, &mut self.found);
                write_line(out, key, self.found.iter().map(|&i| nodes[i].name()))?;
            }
            return Ok(());
        }
        self.owners.clear();
        self.owners.resize(keys.len(), None);
        if keys.len() == 1 {
            self.owners[0] = self.placement.locate(keys[0]);
        } else {
            self.placement.locate_many(keys, &mut self.owners);
        }
        for (&key, owner) in keys.iter().zip(&self.owners) {
            write_line(out, key, owner.iter().map(|&i| nodes[i].name()))?;
        }
        Ok(())
    }
}

/// `KEY<TAB>NODE<TAB>NODE...\n`.
fn write_line<'n>(
    out: &mut impl Write,
    key: &[u8],
    nodes: impl Iterator<Item = &'n str>,
) -> io::Result<()> {
    out.write_all(key)?;
    for name in nodes {
        out.write_all(b"\t")?;
        out.write_all(name.as_bytes())?;
    }
    out.write_all(b"\n")
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
        if args.line_table {
            bail!("--line-table is for --algo ring, not --compat");
        }
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
    if args.line_table && algorithm != Algorithm::Ring {
        bail!("--line-table is for --algo ring, not {}", args.algo);
    }
    options.line_table = args.line_table;
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
