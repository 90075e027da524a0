//! The native module `shardring._shardring` of the Python package `shardring` (python/shardring/):
//! the library's rings, algorithms and compatibility modes, and twemproxy pools read by the proxy's
//! own configuration reader, and the digest of a pool's placement (what proxies and client-side rings
//! report while they take part in a planned change). The Python side adds the uhashring drop-in and
//! the pymemcache client.
//!
//! Nothing here places a key: every placement is the library's, so Python and Rust programs (and the
//! proxy, and the programs the compatibility modes reproduce) agree on every key.

mod digest;
mod errors;
mod keys;
mod pool_file;
mod recipe;
mod ring;
mod twemproxy;

use pyo3::prelude::*;

/// `text` as Python's `repr()` of a plain string writes it: in single quotes (for `__repr__`s).
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The native half of the `shardring` package; import `shardring`.
#[pymodule]
fn _shardring(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<ring::Ring>()?;
    m.add_class::<ring::Migration>()?;
    m.add_class::<twemproxy::TwemproxyPool>()?;
    m.add_class::<errors::ConfigProblem>()?;
    m.add("ConfigError", py.get_type::<errors::ConfigError>())?;
    m.add("EmptyRingError", py.get_type::<errors::EmptyRingError>())?;
    m.add_function(wrap_pyfunction!(twemproxy::read_twemproxy, m)?)?;
    m.add_function(wrap_pyfunction!(digest::placement_digest, m)?)?;
    let modes: Vec<&str> = shardring::compat::CompatMode::ALL
        .iter()
        .map(|m| m.name())
        .chain(["template"])
        .collect();
    m.add("COMPAT_MODES", modes)?;
    let algorithms: Vec<&str> = shardring::algo::Algorithm::ALL
        .iter()
        .map(|a| a.name())
        .collect();
    m.add("ALGORITHMS", algorithms)?;
    let hashes: Vec<&str> = shardring::HashFunction::ALL
        .iter()
        .map(|h| h.name())
        .collect();
    m.add("HASHES", hashes)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
