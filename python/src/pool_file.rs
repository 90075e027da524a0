//! A twemproxy (nutcracker) pool as its settings give it: read from a YAML file by the proxy crate's
//! reader (which reports every problem with its line), or from server lines or etcd members with
//! the settings named; and the [`Recipe`] of the library's byte-exact twemproxy placement for it.
//! Below both the `Ring` constructors and the `TwemproxyPool` class, which build on it.

use std::path::Path;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shardring::compat::twemproxy::{self, Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;
use shardring::membership::Member;
use shardring_config::read_pools;
use shardring_config::ProxyConfig;

use crate::errors::{config_error, value_error};
use crate::recipe::Recipe;

/// One pool's placement settings and servers.
#[derive(Debug, Clone)]
pub(crate) struct PoolFile {
    /// The pool's name.
    pub(crate) name: String,
    /// `redis: true`: the pool's servers speak Redis, not memcached.
    pub(crate) redis: bool,
    /// `hash`.
    pub(crate) hash: TwemproxyHash,
    /// `hash_tag`.
    pub(crate) hash_tag: Option<[u8; 2]>,
    /// `distribution`.
    pub(crate) distribution: Distribution,
    /// `servers`, in file order.
    pub(crate) servers: Vec<TwemproxyServer>,
}

impl PoolFile {
    /// Where nutcracker sends each key of the pool.
    pub(crate) fn recipe(&self) -> Recipe {
        Recipe::Twemproxy {
            hash: self.hash,
            hash_tag: self.hash_tag,
            distribution: self.distribution,
            servers: self.servers.clone(),
        }
    }
}

/// Reads the pool `pool` of the YAML file at `path` (the only pool when `None`).
pub(crate) fn read(py: Python<'_>, path: &Path, pool: Option<&str>) -> PyResult<PoolFile> {
    let text = std::fs::read_to_string(path)?;
    let shown = path.display().to_string();
    // The reader alone, not the proxy's own checks: a pool is placed the same whatever the proxy
    // would say about, say, its listen address being taken.
    let config = ProxyConfig {
        pools: read_pools(&text).map_err(|e| config_error(py, &shown, &e))?,
    };
    let found = config
        .pool(pool)
        .map_err(|e| config_error(py, &shown, &e))?;
    Ok(PoolFile {
        name: found.name.clone(),
        redis: found.is_redis(),
        hash: found.hash,
        hash_tag: found.hash_tag,
        distribution: found.distribution,
        servers: found.servers.clone(),
    })
}

/// The placement of server lines with a pool's settings (`Ring.from_twemproxy_servers`).
pub(crate) fn from_servers(
    lines: &[String],
    hash: &str,
    hash_tag: Option<&str>,
    distribution: &str,
) -> PyResult<Recipe> {
    let mut servers = Vec::with_capacity(lines.len());
    let mut problems = Vec::new();
    for line in lines {
        match line.parse::<TwemproxyServer>() {
            Ok(s) => servers.push(s),
            Err(e) => problems.push(format!("server {line:?} {e}")),
        }
    }
    if !problems.is_empty() {
        return Err(PyValueError::new_err(problems.join("; ")));
    }
    with_settings(servers, hash, hash_tag, distribution)
}

/// The placement of a pool's members as etcd holds them (`Ring.from_members`): each `(name, address,
/// weight)` becomes the twemproxy server it stands for (the library's `Member::to_twemproxy`: a
/// member named by its address is an unnamed server), so a pool published from a YAML file places
/// every key where the file did.
pub(crate) fn from_members(
    members: Vec<(String, String, u32)>,
    hash: &str,
    hash_tag: Option<&str>,
    distribution: &str,
) -> PyResult<Recipe> {
    let servers = members
        .into_iter()
        .map(|(name, addr, weight)| {
            Member::new(name, addr, weight)
                .and_then(|m| m.to_twemproxy())
                .map_err(|e| PyValueError::new_err(e.to_string()))
        })
        .collect::<PyResult<Vec<_>>>()?;
    with_settings(servers, hash, hash_tag, distribution)
}

/// The placement of `servers` under a pool's `hash`, `hash_tag` and `distribution`, given by name.
fn with_settings(
    servers: Vec<TwemproxyServer>,
    hash: &str,
    hash_tag: Option<&str>,
    distribution: &str,
) -> PyResult<Recipe> {
    let hash = hash.parse::<TwemproxyHash>().map_err(value_error)?;
    let hash_tag = hash_tag
        .map(twemproxy::hash_tag)
        .transpose()
        .map_err(value_error)?;
    let distribution = distribution.parse::<Distribution>().map_err(value_error)?;
    Ok(Recipe::Twemproxy {
        hash,
        hash_tag,
        distribution,
        servers,
    })
}
