//! twemproxy (nutcracker) pools: read from a YAML file by the proxy crate's reader, which reports
//! every problem with its line, and placed by the library's byte-exact twemproxy placement.

use std::path::Path;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shardring::compat::twemproxy::{self, Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;
use shardring::membership::Member;
use shardring_proxy::config::read_pools;
use shardring_proxy::ProxyConfig;

use crate::errors::{config_error, value_error};
use crate::recipe::Recipe;
use crate::ring::Ring;

/// One pool of a twemproxy YAML file: what places its keys, and where its servers are.
#[pyclass(frozen, module = "shardring")]
#[derive(Debug, Clone)]
pub struct TwemproxyPool {
    /// The pool's name.
    #[pyo3(get)]
    name: String,
    /// `redis: true`: the pool's servers speak Redis, not memcached.
    #[pyo3(get)]
    redis: bool,
    /// `hash`.
    hash: TwemproxyHash,
    /// `hash_tag`.
    hash_tag: Option<[u8; 2]>,
    /// `distribution`.
    distribution: Distribution,
    /// `servers`, in file order.
    servers: Vec<TwemproxyServer>,
}

#[pymethods]
impl TwemproxyPool {
    /// `hash`, as the file names it (`fnv1a_64` by default).
    #[getter]
    fn hash(&self) -> &'static str {
        self.hash.name()
    }

    /// `hash_tag`, or `None`.
    #[getter]
    fn hash_tag(&self) -> Option<String> {
        self.hash_tag
            .map(|t| String::from_utf8_lossy(&t).into_owned())
    }

    /// `distribution`: `ketama`, `modula` or `random`.
    #[getter]
    fn distribution(&self) -> &'static str {
        self.distribution.name()
    }

    /// The servers in file order: `(node, host, port, weight)`, where `node` is what the ring
    /// names the server (its name, else `host:port`), and a unix socket has its path as `host` and
    /// port 0.
    #[getter]
    fn servers(&self) -> Vec<(String, String, u16, u32)> {
        self.servers
            .iter()
            .map(|s| (s.display_name(), s.host.clone(), s.port, s.weight))
            .collect()
    }

    /// The pool's ring: where nutcracker sends each key. Raises `ValueError` for
    /// `distribution: random`, which places no key reproducibly.
    pub(crate) fn ring(&self, py: Python<'_>) -> PyResult<Ring> {
        Ring::build(
            py,
            Recipe::Twemproxy {
                hash: self.hash,
                hash_tag: self.hash_tag,
                distribution: self.distribution,
                servers: self.servers.clone(),
            },
            &[],
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "TwemproxyPool(name={}, hash={}, distribution={}, servers={})",
            crate::quote(&self.name),
            crate::quote(self.hash.name()),
            crate::quote(self.distribution.name()),
            self.servers.len()
        )
    }
}

/// Reads the pool `pool` of the YAML file at `path` (the only pool when `None`).
pub(crate) fn read(py: Python<'_>, path: &Path, pool: Option<&str>) -> PyResult<TwemproxyPool> {
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
    Ok(TwemproxyPool {
        name: found.name.clone(),
        redis: found.is_redis(),
        hash: found.hash,
        hash_tag: found.hash_tag,
        distribution: found.distribution,
        servers: found.servers.clone(),
    })
}

/// `shardring.read_twemproxy(path, pool=None)`: one pool of a twemproxy YAML file, with its servers'
/// addresses (what a client connects to) and its ring.
///
/// Raises `shardring.ConfigError` listing every problem of a bad file (each with its line), and
/// `OSError` when the file cannot be read.
#[pyfunction]
#[pyo3(signature = (path, pool=None))]
pub(crate) fn read_twemproxy(
    py: Python<'_>,
    path: std::path::PathBuf,
    pool: Option<&str>,
) -> PyResult<TwemproxyPool> {
    read(py, &path, pool)
}

/// The ring of server lines with a pool's placement settings (`Ring.from_twemproxy_servers`).
pub(crate) fn from_servers(
    py: Python<'_>,
    lines: &[String],
    hash: &str,
    hash_tag: Option<&str>,
    distribution: &str,
) -> PyResult<Ring> {
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
    with_settings(py, servers, hash, hash_tag, distribution)
}

/// The ring of a pool's members as etcd holds them (`Ring.from_members`): each `(name, address,
/// weight)` becomes the twemproxy server it stands for (the library's `Member::to_twemproxy`: a
/// member named by its address is an unnamed server), so a pool published from a YAML file places
/// every key where the file did.
pub(crate) fn from_members(
    py: Python<'_>,
    members: Vec<(String, String, u32)>,
    hash: &str,
    hash_tag: Option<&str>,
    distribution: &str,
) -> PyResult<Ring> {
    let servers = members
        .into_iter()
        .map(|(name, addr, weight)| {
            Member::new(name, addr, weight)
                .and_then(|m| m.to_twemproxy())
                .map_err(|e| PyValueError::new_err(e.to_string()))
        })
        .collect::<PyResult<Vec<_>>>()?;
    with_settings(py, servers, hash, hash_tag, distribution)
}

/// The ring of `servers` under a pool's `hash`, `hash_tag` and `distribution`, given by name.
fn with_settings(
    py: Python<'_>,
    servers: Vec<TwemproxyServer>,
    hash: &str,
    hash_tag: Option<&str>,
    distribution: &str,
) -> PyResult<Ring> {
    let hash = hash.parse::<TwemproxyHash>().map_err(value_error)?;
    let hash_tag = hash_tag
        .map(twemproxy::hash_tag)
        .transpose()
        .map_err(value_error)?;
    let distribution = distribution.parse::<Distribution>().map_err(value_error)?;
    Ring::build(
        py,
        Recipe::Twemproxy {
            hash,
            hash_tag,
            distribution,
            servers,
        },
        &[],
    )
}
