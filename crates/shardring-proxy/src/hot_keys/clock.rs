//! A coarse clock: milliseconds since the pool started, in one atomic that a ticker task advances, so the
//! request path reads the time with one relaxed load instead of `Instant::now()` (tens of nanoseconds on
//! this kind of machine, per request).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How often the ticker advances the clock: the resolution of every time read through it.
pub(crate) const RESOLUTION: Duration = Duration::from_millis(1);

/// Milliseconds since `start`, advanced by [`CoarseClock::tick`]. Reads lag the true time by at most
/// one tick plus the ticker's scheduling delay.
#[derive(Debug)]
pub(crate) struct CoarseClock {
    /// What the milliseconds count from.
    start: Instant,
    /// Milliseconds since `start` at the last tick. Relaxed: a lone number, nothing is published
    /// through it.
    now_ms: AtomicU64,
}

impl CoarseClock {
    /// A clock at 0.
    pub(crate) fn new() -> CoarseClock {
        CoarseClock {
            start: Instant::now(),
            now_ms: AtomicU64::new(0),
        }
    }

    /// The time at the last tick, in milliseconds since the clock was made.
    pub(crate) fn now_ms(&self) -> u64 {
        self.now_ms.load(Relaxed)
    }

    /// Reads the real clock and publishes it (the ticker calls this every [`RESOLUTION`]).
    pub(crate) fn tick(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.now_ms.fetch_max(ms, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_only_when_ticked() {
        let c = CoarseClock::new();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.now_ms(), 0);
        c.tick();
        assert!(c.now_ms() >= 5);
    }
}
