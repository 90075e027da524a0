//! `shardring`: analyse, look up, draw, diff and simulate consistent-hash placements.
//!
//! Exit status: 0 on success; 2 on a usage, input or configuration error, with the reason on stderr and
//! nothing on stdout.

mod allocator;
mod cmd;
mod compat;
mod daemon;
mod fatal;
mod logging;
mod nodes;
mod plot;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Consistent hashing for cache clusters: measure spread and key movement, look keys up, inspect rings.
#[derive(Debug, Parser)]
#[command(name = "shardring", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure every algorithm's spread, key movement, build time and lookup speed on synthetic keys.
    Analyze(cmd::analyze::Args),
    /// Print the node(s) of each key: KEY<TAB>NODE[<TAB>NODE...].
    Lookup(cmd::lookup::Args),
    /// Print a ring's continuum, its nodes' shares, or the migration plan to another node list.
    Ring(cmd::ring::Args),
    /// Replay synthetic traffic round by round, with the adaptive rebalancer and/or bounded loads (JSON).
    Simulate(cmd::simulate::Args),
    /// Run the pools of a twemproxy (nutcracker) YAML file as a memcached and Redis sharding proxy.
    // Boxed: the proxy's flags outweigh every other command's. Its -V/--version is its own
    // (nutcracker's line, for the scripts that read it), not clap's.
    #[command(disable_version_flag = true)]
    Proxy(Box<cmd::proxy::Args>),
    /// A pool's servers in etcd: publish a YAML pool, list, add, remove, re-weight, watch.
    Members(cmd::members::Args),
    /// Copy a pool's keys to their next owners while the proxies dual-write, then cut over.
    Migrate(cmd::migrate::Args),
    /// Split a pool's hot keys over several servers (or merge them back), every proxy confirming
    /// each phase; `auto` follows the proxies' hot-key detection.
    Split(cmd::split::Args),
    /// Write the man pages and shell completions (for packaging).
    #[command(hide = true)]
    GenerateDocs(cmd::generate_docs::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze(args) => cmd::analyze::run(args),
        Command::Lookup(args) => cmd::lookup::run(args),
        Command::Ring(args) => cmd::ring::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Proxy(args) => cmd::proxy::run(*args),
        Command::Members(args) => cmd::members::run(args),
        Command::Migrate(args) => cmd::migrate::run(args),
        Command::Split(args) => cmd::split::run(args),
        Command::GenerateDocs(args) => cmd::generate_docs::run(args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`shardring ring ... | head`) is the reader's choice, not our failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let _ = io::stdout().flush();
            eprintln!("shardring: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
