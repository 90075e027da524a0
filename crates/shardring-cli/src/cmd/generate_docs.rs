//! `shardring generate-docs DIR` (hidden): the man pages and shell completions that
//! `scripts/package-deb` installs, made from the command's own flag definitions, so they say what
//! `--help` says.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap_complete::Shell;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Writes DIR/man/shardring.1 (and one page per subcommand, shardring-proxy.1 …) and
    /// DIR/completions/ (shardring.bash, _shardring for zsh, shardring.fish).
    dir: PathBuf,
}

pub fn run(args: Args, command: clap::Command) -> Result<()> {
    let man = args.dir.join("man");
    let completions = args.dir.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut command = without_help(command);
    command.build();
    clap_mangen::generate_to(command.clone(), &man)
        .with_context(|| format!("writing the man pages to {}", man.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut command, "shardring", &completions)
            .with_context(|| format!("writing the {shell} completions"))?;
    }
    Ok(())
}

/// `command` without clap's `help` subcommands, which would each get a man page of their own
/// (`--help` stays).
fn without_help(command: clap::Command) -> clap::Command {
    command
        .disable_help_subcommand(true)
        .mut_subcommands(without_help)
}
