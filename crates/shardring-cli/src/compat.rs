//! Placements that reproduce other programs: `--config nutcracker.yml` and `--compat MODE`.

use std::path::Path;

use anyhow::{Context, Result};
use shardring::compat::CompatMode;
use shardring::{Node, Placement, Ring};
use shardring_proxy::{ConfigErrors, ProxyConfig};

/// The placement of one pool of a twemproxy configuration file.
///
/// A file with problems is an error listing every one of them (with its line), so the user fixes the
/// file in one go.
pub fn from_config(path: &Path, pool: Option<&str>) -> Result<Box<dyn Placement>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // The reader alone (not the proxy's own checks): a redis pool is placed like any other.
    let config = ProxyConfig {
        pools: shardring_proxy::config::read_pools(&text).map_err(|e| config_problems(path, &e))?,
    };
    let pool = config.pool(pool).map_err(|e| config_problems(path, &e))?;
    pool.placement()
        .with_context(|| format!("{}: pool {}", path.display(), pool.name))
}

/// A configuration file's problems, every one on its own line (with its line in the file).
pub fn config_problems(path: &Path, e: &ConfigErrors) -> anyhow::Error {
    anyhow::anyhow!(
        "configuration file {} has {} problem{}:\n  {}",
        path.display(),
        e.problems.len(),
        if e.problems.len() == 1 { "" } else { "s" },
        e.problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  ")
    )
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
