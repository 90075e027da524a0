//! Placements that reproduce other programs: `--config nutcracker.yml` and `--compat MODE`.

use std::path::Path;

use anyhow::{Context, Result};
use shardring::compat::twemproxy_config::Config;
use shardring::compat::CompatMode;
use shardring::{Node, Placement, Ring};

/// The placement of one pool of a twemproxy configuration file.
///
/// A file with problems is an error listing every one of them (with its line), so the user fixes the
/// file in one go.
pub fn from_config(path: &Path, pool: Option<&str>) -> Result<Box<dyn Placement>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config = Config::parse(&text).with_context(|| path.display().to_string())?;
    let pool = config
        .pool(pool)
        .with_context(|| path.display().to_string())?;
    pool.placement()
        .with_context(|| format!("{}: pool {}", path.display(), pool.name))
}

/// The ring of `nodes` as the program named by `mode` builds it, with its key hash `hash` (the
/// program's name for it) or its default.
pub fn from_nodes(mode: &str, nodes: &[Node], hash: Option<&str>) -> Result<Box<dyn Placement>> {
    Ok(Box::new(ring_from_nodes(mode, nodes, hash)?))
}

/// As [`from_nodes`], as the ring itself (for `shardring ring`).
pub fn ring_from_nodes(mode: &str, nodes: &[Node], hash: Option<&str>) -> Result<Ring> {
    let mode: CompatMode = mode.parse()?;
    let list: Vec<(&str, f64)> = nodes.iter().map(|n| (n.name(), n.weight())).collect();
    mode.build(&list, hash)
        .with_context(|| format!("--compat {mode}"))
}
