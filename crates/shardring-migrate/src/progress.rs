//! The running tallies of a run, shared by its jobs and read by the progress bar.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters every job of a run adds to as it goes (relaxed atomics: each is a lone number).
#[derive(Debug, Default)]
pub struct Progress {
    /// Keys seen on the sources (every pass).
    pub scanned: AtomicU64,
    /// Keys found to move (each counted once).
    pub moving: AtomicU64,
    /// Keys written to their target by the copy.
    pub copied: AtomicU64,
    /// Keys not written because the target already held them (a dual write's newer value, or a
    /// previous run's copy).
    pub skipped: AtomicU64,
    /// Keys gone from the source before or after they were read (deleted or expired meanwhile):
    /// nothing written, or the copy removed again.
    pub gone: AtomicU64,
    /// Keys copied again because they changed on the source after they were read.
    pub recopied: AtomicU64,
    /// Keys that could not be copied (refused by the target, too large…).
    pub failed: AtomicU64,
    /// Bytes of values written to targets.
    pub bytes: AtomicU64,
}

impl Progress {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The tallies now.
    pub fn report(&self) -> Report {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Report {
            scanned: get(&self.scanned),
            moving: get(&self.moving),
            copied: get(&self.copied),
            skipped: get(&self.skipped),
            gone: get(&self.gone),
            recopied: get(&self.recopied),
            failed: get(&self.failed),
            bytes: get(&self.bytes),
        }
    }
}

/// A snapshot of [`Progress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// See [`Progress::scanned`].
    pub scanned: u64,
    /// See [`Progress::moving`].
    pub moving: u64,
    /// See [`Progress::copied`].
    pub copied: u64,
    /// See [`Progress::skipped`].
    pub skipped: u64,
    /// See [`Progress::gone`].
    pub gone: u64,
    /// See [`Progress::recopied`].
    pub recopied: u64,
    /// See [`Progress::failed`].
    pub failed: u64,
    /// See [`Progress::bytes`].
    pub bytes: u64,
}
