//! One rate limit's bucket, lock-free: the generic cell rate algorithm (GCRA), a token bucket kept
//! as one number, the theoretical arrival time of the next request. A request is admitted when that
//! time is no further ahead of now than the burst allows, and moves it on by one interval; one
//! compare-and-swap, no lock, no timer. The bucket holds a tenth of a second's worth of requests, so
//! over any second a key takes its rate and at most a tenth more (and an idle key cannot save up a
//! burst that a server would feel).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// One limit's state.
#[derive(Debug)]
pub(crate) struct Gcra {
    /// Nanoseconds after `epoch` at which the bucket is full again (the next request's theoretical
    /// arrival time).
    tat: AtomicU64,
    /// Nanoseconds one request costs (a second over the rate).
    interval: u64,
    /// How far ahead of now the arrival time may be and still admit (the burst, less one interval).
    burst: u64,
}

impl Gcra {
    /// A full bucket for `rate` requests a second.
    pub(crate) fn new(rate: u32) -> Gcra {
        let interval = 1_000_000_000 / u64::from(rate.max(1));
        // A tenth of a second's worth, at least one request.
        let burst = (100_000_000 / interval).max(1).saturating_sub(1) * interval;
        Gcra {
            tat: AtomicU64::new(0),
            interval,
            burst,
        }
    }

    /// A bucket for `rate` requests a second whose burst was spent just before `now`: for a key
    /// that reached its limit's mark, having already taken that many requests in the window.
    pub(crate) fn spent(rate: u32, now: u64) -> Gcra {
        let g = Gcra::new(rate);
        g.tat.store(now.saturating_add(g.burst), Relaxed);
        g
    }

    /// Whether a request at `now` (nanoseconds after the clock's epoch) is within the limit; if so
    /// it is counted.
    pub(crate) fn admit(&self, now: u64) -> bool {
        let mut tat = self.tat.load(Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > self.burst {
                return false;
            }
            match self
                .tat
                .compare_exchange_weak(tat, start + self.interval, Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

/// The limits' clock: nanoseconds since it started.
#[derive(Debug)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock(Instant::now())
    }

    /// Nanoseconds since the clock started.
    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a naive token bucket admits over `seconds` at `offered` requests a second, evenly spaced.
    fn admitted(rate: u32, offered: u64, seconds: u64) -> u64 {
        let g = Gcra::new(rate);
        let step = 1_000_000_000 / offered;
        (0..offered * seconds).filter(|i| g.admit(i * step)).count() as u64
    }

    #[test]
    fn over_its_rate_a_key_gets_its_rate_and_under_it_everything() {
        // 10× over: the rate, plus at most a tenth of a second's burst.
        let got = admitted(1000, 10_000, 10);
        assert!((10_000..=10_100).contains(&got), "{got}");
        // Under the limit: everything.
        assert_eq!(admitted(1000, 500, 4), 2000);
        // A slow limit: one a second, no burst beyond one.
        assert_eq!(admitted(1, 100, 5), 5);
    }

    #[test]
    fn a_spent_bucket_paces_at_once() {
        let g = Gcra::spent(1000, 5_000_000_000);
        let at_once = (0..1000).filter(|_| g.admit(5_000_000_000)).count();
        assert_eq!(at_once, 1);
        assert!(g.admit(5_001_000_000));
    }

    #[test]
    fn a_burst_is_a_tenth_of_a_seconds_worth() {
        let g = Gcra::new(1000);
        let at_once = (0..1000).filter(|_| g.admit(5_000_000_000)).count();
        assert_eq!(at_once, 100);
    }
}
