//! `shardring.TwemproxyPool` and `shardring.read_twemproxy`: one pool of a twemproxy (nutcracker)
//! YAML file ([`crate::pool_file`]) as Python sees it, with its ring.

use pyo3::prelude::*;

use crate::pool_file::{self, PoolFile};
use crate::ring::Ring;

/// One pool of a twemproxy YAML file: what places its keys, and where its servers are.
#[pyclass(frozen, module = "shardring")]
#[derive(Debug, Clone)]
pub struct TwemproxyPool {
    /// The pool as its file gives it.
    pool: PoolFile,
}

#[pymethods]
impl TwemproxyPool {
    /// The pool's name.
    #[getter]
    fn name(&self) -> &str {
        &self.pool.name
    }

    /// `redis: true`: the pool's servers speak Redis, not memcached.
    #[getter]
    fn redis(&self) -> bool {
        self.pool.redis
    }

    /// `hash`, as the file names it (`fnv1a_64` by default).
    #[getter]
    fn hash(&self) -> &'static str {
        self.pool.hash.name()
    }

    /// `hash_tag`, or `None`.
    #[getter]
    fn hash_tag(&self) -> Option<String> {
        self.pool
            .hash_tag
            .map(|t| String::from_utf8_lossy(&t).into_owned())
    }

    /// `distribution`: `ketama`, `modula` or `random`.
    #[getter]
    fn distribution(&self) -> &'static str {
        self.pool.distribution.name()
    }

    /// The servers in file order: `(node, host, port, weight)`, where `node` is what the ring
    /// names the server (its name, else `host:port`), and a unix socket has its path as `host` and
    /// port 0.
    #[getter]
    fn servers(&self) -> Vec<(String, String, u16, u32)> {
        self.pool
            .servers
            .iter()
            .map(|s| (s.display_name(), s.host.clone(), s.port, s.weight))
            .collect()
    }

    /// The pool's ring: where nutcracker sends each key. Raises `ValueError` for
    /// `distribution: random`, which places no key reproducibly.
    pub(crate) fn ring(&self, py: Python<'_>) -> PyResult<Ring> {
        Ring::build(py, self.pool.recipe(), &[])
    }

    fn __repr__(&self) -> String {
        format!(
            "TwemproxyPool(name={}, hash={}, distribution={}, servers={})",
            crate::quote(&self.pool.name),
            crate::quote(self.pool.hash.name()),
            crate::quote(self.pool.distribution.name()),
            self.pool.servers.len()
        )
    }
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
    let pool = pool_file::read(py, &path, pool)?;
    Ok(TwemproxyPool { pool })
}
