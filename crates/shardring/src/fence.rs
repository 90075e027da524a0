//! The fence of a participant of planned changes (a proxy, or a client-side ring): whether its place
//! in etcd is confirmed.
//!
//! While a pool has a next membership, `shardring migrate` copies the keys that move and cuts over
//! once every participant of the pool's roster acknowledges each step. A participant cut off from
//! etcd (or paused) cannot acknowledge, so the migration waits for it; but an operator may take it
//! out of the roster (`shardring members forget`), after which the others stop writing the old
//! owners. So a participant whose registration has not been renewed for [`Fence::after`] (shorter
//! than the registration's lease, the earliest anyone may act on its absence) refuses every key whose
//! owner differs between its current and next membership, and serves every other key as usual.
//! Without a planned change nothing is fenced: a participant merely cut off keeps serving
//! everything.
//!
//! During a change a renewal alone does not lift the fence: a participant coming back from a
//! partition renews before its watch has caught up, so the registration task (`shardring_etcd`'s
//! `take_part`) reads the pool from etcd and applies it first, and confirms the earlier of the two.
//!
//! In the library (atomics and a clock, no I/O) so that whatever serves keys can hold one whether
//! or not it follows etcd: one that does not is never fenced.
//!
//! The cost is availability, only for the keys that move and only while the participant cannot
//! renew its registration during a change; never a stale value. Reading it is one atomic load and
//! the clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long after its last renewal a registration's participant fences, as a share of the lease's time
/// to live: renewals come every quarter of it, so a participant that is merely slow keeps two renewals of
/// slack, and it fences well before the lease lapses.
const FENCE_SHARE_OF_TTL: f64 = 0.6;

/// One participant's fence: whether its place in etcd is confirmed. Shared by what serves keys (which
/// reads it) and the registration task (which confirms it).
#[derive(Debug)]
pub struct Fence {
    /// What the millisecond counters count from.
    epoch: Instant,
    /// Whether the pool is followed in etcd and registered there (off: never fenced).
    following: AtomicBool,
    /// When the registration was last confirmed (renewed or written), ms since `epoch`.
    confirmed_ms: AtomicU64,
    /// How long without a confirmation fences, in ms.
    after_ms: AtomicU64,
    /// When a refusal was last logged, ms since `epoch` (logged at most once every few seconds).
    logged_ms: AtomicU64,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            epoch: Instant::now(),
            following: AtomicBool::new(false),
            confirmed_ms: AtomicU64::new(0),
            after_ms: AtomicU64::new(u64::MAX),
            logged_ms: AtomicU64::new(0),
        }
    }
}

impl Fence {
    /// The participant is now registered in etcd under a lease of `ttl`: from now on a confirmation older
    /// than [`Fence::after`] of it fences. Counts as a confirmation.
    pub fn follow(&self, ttl: Duration) {
        let after = Fence::after(ttl);
        self.after_ms.store(
            u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.confirm(Instant::now());
        // Release: a session that sees `following` sees the confirmation and the limit above.
        self.following.store(true, Ordering::Release);
    }

    /// How long without a renewal fences, for a registration lease of `ttl`.
    pub fn after(ttl: Duration) -> Duration {
        ttl.mul_f64(FENCE_SHARE_OF_TTL)
    }

    /// The registration was confirmed at `at` (kept only when newer than the last).
    pub fn confirm(&self, at: Instant) {
        let ms = self.ms(at);
        self.confirmed_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long the registration has gone unconfirmed, when that is longer than the fence time;
    /// `None` while confirmed (or not registered).
    pub fn unconfirmed_for(&self) -> Option<Duration> {
        if !self.following.load(Ordering::Acquire) {
            return None;
        }
        let now = self.ms(Instant::now());
        let since = now.saturating_sub(self.confirmed_ms.load(Ordering::Relaxed));
        (since > self.after_ms.load(Ordering::Relaxed)).then(|| Duration::from_millis(since))
    }

    /// Whether a refusal should be logged now (at most once every 5 s): callers log at most that often.
    pub fn log_now(&self) -> bool {
        let now = self.ms(Instant::now()).max(1);
        let last = self.logged_ms.load(Ordering::Relaxed);
        (last == 0 || now.saturating_sub(last) >= 5_000)
            && self
                .logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_closes_only_while_following_and_unconfirmed_for_longer_than_its_time() {
        let f = Fence::default();
        assert_eq!(
            f.unconfirmed_for(),
            None,
            "not following etcd: never fenced"
        );
        f.follow(Duration::from_millis(100));
        assert_eq!(
            Fence::after(Duration::from_secs(10)),
            Duration::from_secs(6)
        );
        assert_eq!(f.unconfirmed_for(), None, "confirmed at follow");
        std::thread::sleep(Duration::from_millis(80));
        let fenced = f
            .unconfirmed_for()
            .expect("unconfirmed for longer than 60 ms");
        assert!(fenced >= Duration::from_millis(60), "{fenced:?}");
        f.confirm(Instant::now());
        assert_eq!(f.unconfirmed_for(), None, "confirmed again");
        // An older confirmation never moves it back.
        f.confirm(f.epoch);
        assert_eq!(f.unconfirmed_for(), None);
        assert!(f.log_now());
        assert!(!f.log_now(), "once every few seconds");
    }
}
