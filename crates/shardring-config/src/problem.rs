//! Configuration problems: each with its line and key when it has them, all reported at once.

use std::fmt;

/// One problem of a configuration: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The 1-based line of the file the problem is on (0 when it concerns the whole file, or a config
    /// built in code).
    pub line: usize,
    /// The key concerned, as `POOL.KEY` (or `POOL`, or empty for the whole file).
    pub key: String,
    /// What is wrong, in nutcracker's words where it has some.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: ", self.line)?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

/// One or more configuration problems, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(problems))]
pub struct ConfigErrors {
    /// Each problem.
    pub problems: Vec<ConfigProblem>,
}

fn render(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ConfigErrors {
    /// Records a problem of the pool `pool` (empty: of the whole config) found outside the file's
    /// reader (no line).
    pub fn push(&mut self, pool: &str, message: String) {
        self.problems.push(ConfigProblem {
            line: 0,
            key: pool.to_owned(),
            message,
        });
    }

    /// `Ok` when there are no problems.
    ///
    /// # Errors
    /// `self` when there are.
    pub fn into_result(self) -> Result<(), ConfigErrors> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}
