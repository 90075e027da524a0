//! A Sentinel client's counters, for the stats JSON and `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a [`super::Sentinels`] has seen. Each counter stands alone (nothing else is published through
/// it), so `Relaxed` loads and stores are enough.
#[derive(Debug, Default)]
pub struct SentinelStats {
    /// Master changes reported after a group's first address: failovers seen, each once however many
    /// Sentinels announced it.
    switches: AtomicU64,
    /// Rounds in which a group's master could not be had from any Sentinel.
    resolve_errors: AtomicU64,
    /// Sentinels with a live `+switch-master` subscription now.
    connected: AtomicU64,
}

impl SentinelStats {
    /// Master changes reported (failovers seen), not counting each group's first address.
    pub fn switches(&self) -> u64 {
        self.switches.load(Ordering::Relaxed)
    }

    /// Times no Sentinel gave a group's master.
    pub fn resolve_errors(&self) -> u64 {
        self.resolve_errors.load(Ordering::Relaxed)
    }

    /// Sentinels subscribed to `+switch-master` now.
    pub fn connected(&self) -> u64 {
        self.connected.load(Ordering::Relaxed)
    }

    pub(crate) fn switched(&self) {
        self.switches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn resolve_failed(&self) {
        self.resolve_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a subscribed Sentinel until the guard is dropped (however the connection ends: an error,
    /// or the watch being cancelled).
    pub(crate) fn subscribed(&self) -> Subscribed<'_> {
        self.connected.fetch_add(1, Ordering::Relaxed);
        Subscribed(self)
    }
}

/// One subscribed Sentinel in [`SentinelStats::connected`].
#[derive(Debug)]
pub(crate) struct Subscribed<'a>(&'a SentinelStats);

impl Drop for Subscribed<'_> {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::Relaxed);
    }
}
