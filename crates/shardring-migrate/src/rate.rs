//! The copy's pace: at most so many keys and bytes a second over every job of a run, so the live
//! traffic on the same servers keeps its latency.
//!
//! A token bucket per budget, refilled continuously, holding at most a tenth of a second's worth:
//! a pause does not buy a burst (a full second's worth at once is what a live load's p99 sees). A
//! batch waits until both budgets cover it; a batch larger than the bucket waits for a full bucket
//! and runs (the budget goes negative and the next batches wait it off), so a single large value
//! never blocks the copy.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most a bucket holds, in seconds of its rate.
const BURST: f64 = 0.1;

/// Keys and bytes per second, shared by the jobs of one run.
#[derive(Debug)]
pub struct RateLimit {
    /// Keys per second; `None`: unlimited.
    keys_per_sec: Option<f64>,
    /// Bytes per second; `None`: unlimited.
    bytes_per_sec: Option<f64>,
    /// The two buckets' levels, and when they were last refilled.
    state: Mutex<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    keys: f64,
    bytes: f64,
    at: Instant,
}

impl RateLimit {
    /// At most `keys_per_sec` keys and `bytes_per_sec` bytes a second (`None`: that one unlimited).
    /// A rate of 0 is taken as unlimited. The buckets start full.
    pub fn new(keys_per_sec: Option<u64>, bytes_per_sec: Option<u64>) -> RateLimit {
        let rate = |r: Option<u64>| r.filter(|&r| r > 0).map(|r| r as f64);
        let (keys, bytes) = (rate(keys_per_sec), rate(bytes_per_sec));
        RateLimit {
            keys_per_sec: keys,
            bytes_per_sec: bytes,
            state: Mutex::new(Buckets {
                keys: keys.unwrap_or(0.0) * BURST,
                bytes: bytes.unwrap_or(0.0) * BURST,
                at: Instant::now(),
            }),
        }
    }

    /// Waits until `keys` keys and `bytes` bytes may be sent, and takes them from the budgets.
    pub async fn acquire(&self, keys: u64, bytes: u64) {
        loop {
            let wait = self.try_take(keys as f64, bytes as f64, Instant::now());
            match wait {
                None => return,
                Some(d) => tokio::time::sleep(d).await,
            }
        }
    }

    /// Takes the batch when both budgets cover it (or are full: a batch larger than a second),
    /// `None`; else how long to wait.
    fn try_take(&self, keys: f64, bytes: f64, now: Instant) -> Option<Duration> {
        let Ok(mut guard) = self.state.lock() else {
            return None;
        };
        let b = &mut *guard;
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.at = now;
        let mut wait: f64 = 0.0;
        for (level, rate, want) in [
            (&mut b.keys, self.keys_per_sec, keys),
            (&mut b.bytes, self.bytes_per_sec, bytes),
        ] {
            let Some(rate) = rate else { continue };
            let full = rate * BURST;
            *level = (*level + elapsed * rate).min(full);
            // Enough, or a full bucket (the batch is more than the bucket holds: it goes now).
            if *level < want.min(full) {
                wait = wait.max((want.min(full) - *level) / rate);
            }
        }
        if wait > 0.0 {
            return Some(Duration::from_secs_f64(wait.max(0.001)));
        }
        if self.keys_per_sec.is_some() {
            b.keys -= keys;
        }
        if self.bytes_per_sec.is_some() {
            b.bytes -= bytes;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_lets_a_tenth_of_a_seconds_worth_through_then_paces() {
        let limit = RateLimit::new(Some(1000), None);
        let t0 = Instant::now();
        assert_eq!(limit.try_take(100.0, 0.0, t0), None);
        let wait = limit.try_take(100.0, 0.0, t0).unwrap();
        assert!((wait.as_secs_f64() - 0.1).abs() < 0.01, "{wait:?}");
        assert_eq!(
            limit.try_take(100.0, 0.0, t0 + Duration::from_millis(100)),
            None
        );
        // A long pause buys no more than the bucket.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(limit.try_take(100.0, 0.0, later), None);
        assert!(limit.try_take(10.0, 0.0, later).is_some());
    }

    #[test]
    fn the_tighter_budget_sets_the_wait_and_unlimited_never_waits() {
        let limit = RateLimit::new(Some(1_000_000), Some(1000));
        let t0 = Instant::now();
        assert_eq!(limit.try_take(1.0, 100.0, t0), None);
        let wait = limit.try_take(1.0, 50.0, t0).unwrap();
        assert!((wait.as_secs_f64() - 0.05).abs() < 0.01, "{wait:?}");
        let free = RateLimit::new(None, Some(0));
        for _ in 0..10 {
            assert_eq!(free.try_take(1e9, 1e12, t0), None);
        }
    }

    #[test]
    fn a_batch_larger_than_a_second_goes_once_the_bucket_is_full_and_the_debt_is_waited_off() {
        let limit = RateLimit::new(None, Some(1000));
        let t0 = Instant::now();
        assert_eq!(
            limit.try_take(1.0, 5000.0, t0),
            None,
            "full bucket: it goes"
        );
        let wait = limit.try_take(1.0, 10.0, t0).unwrap();
        assert!(wait.as_secs_f64() > 4.9, "{wait:?}: the debt of 4900 bytes");
    }
}
