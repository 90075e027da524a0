//! The exceptions the package raises: the library's errors as `ValueError` with the library's own
//! message, a configuration file's problems as one `ConfigError` that carries every one of them, and
//! a lookup on a ring without nodes as `EmptyRingError`.

use pyo3::create_exception;
use pyo3::exceptions::{PyLookupError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use shardring_config::ConfigErrors;

create_exception!(
    shardring,
    ConfigError,
    PyValueError,
    "A twemproxy configuration with problems: `problems` lists every one (`ConfigProblem`: line, \
     key, message), so the file is fixed in one go. A `ValueError`."
);

create_exception!(
    shardring,
    EmptyRingError,
    PyLookupError,
    "A key was looked up on a ring without nodes: there is nowhere to place it. A `LookupError`."
);

/// The library's error as Python sees it: bad input, so a `ValueError`, with the library's message.
pub(crate) fn value_error(e: shardring::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The error of a lookup that found no node (the ring is empty).
pub(crate) fn empty_ring() -> PyErr {
    EmptyRingError::new_err("the ring has no nodes: add one before looking keys up")
}

/// One problem of a configuration file: where it is and what is wrong.
#[pyclass(frozen, module = "shardring", eq, str)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The 1-based line of the file (0 when the problem concerns the whole file).
    #[pyo3(get)]
    line: usize,
    /// The key concerned, as `POOL.KEY` (or `POOL`, or empty for the whole file).
    #[pyo3(get)]
    key: String,
    /// What is wrong, in nutcracker's words where it has some.
    #[pyo3(get)]
    message: String,
}

#[pymethods]
impl ConfigProblem {
    fn __repr__(&self) -> String {
        format!(
            "ConfigProblem(line={}, key={}, message={})",
            self.line,
            crate::quote(&self.key),
            crate::quote(&self.message)
        )
    }
}

impl std::fmt::Display for ConfigProblem {
    /// The proxy's own rendering: `line 3: alpha.hash: ...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        shardring_config::ConfigProblem {
            line: self.line,
            key: self.key.clone(),
            message: self.message.clone(),
        }
        .fmt(f)
    }
}

/// A `ConfigError` for the problems of the file `path`: the message lists every problem on its own
/// line (as `shardring lookup --config` prints them), and `problems` holds them as objects.
pub(crate) fn config_error(py: Python<'_>, path: &str, e: &ConfigErrors) -> PyErr {
    let n = e.problems.len();
    let message = format!(
        "configuration file {path} has {n} problem{}:\n  {}",
        if n == 1 { "" } else { "s" },
        e.problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    let err = ConfigError::new_err(message);
    let problems = e.problems.iter().map(|p| ConfigProblem {
        line: p.line,
        key: p.key.clone(),
        message: p.message.clone(),
    });
    // Setting an attribute on a fresh exception instance only fails when memory is short; the
    // exception is raised either way.
    if let Ok(list) = PyList::new(py, problems) {
        let _ = err.value(py).setattr("problems", list);
    }
    err
}
