//! One server's circuit breaker (`--circuit-breakers`): a cap on its pending requests, and outlier
//! detection that ejects it after consecutive failures or slow replies and lets one request at a
//! time probe it (half-open) once the ejection is over.
//!
//! Why: a server that stalls (paused, swapping, stuck in a slow command) or fails keeps its clients'
//! requests waiting until the pool's `timeout`, often seconds, and a queue that grows without bound
//! behind them; every client that pipelines or sends multi-key requests waits with them, whatever
//! key it wanted. A breaker answers that server's keys with a fast error that names the server and
//! the reason, and costs the other servers' keys nothing. Envoy's circuit breakers
//! (`max_pending_requests`) and outlier detection (`consecutive_5xx`, `base_ejection_time` growing
//! with each ejection, `max_ejection_time`) are the reference ([`crate::config::BreakerConfig`] for
//! the defaults and where they differ).
//!
//! It never changes the placement: twemproxy's `auto_eject_hosts` does that ([`super::health`]), and
//! keeps its meaning beside a breaker. What counts as a failure here: a connection or connect that
//! failed, a timeout, a reply slower than `slow`, and a request still unanswered after `slow`
//! (reported by the connection that waits for it, so a stalled server is seen while it stalls, not
//! when it answers). Error replies are answers, not failures: a `SERVER_ERROR` or `-ERR` for one
//! request says nothing of the next.
//!
//! Cost on the request path: one relaxed load of `out` and one of the pending gauge; the lock is
//! taken only while the server is out or half-open, and by failures.

pub(crate) mod flags;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::BreakerConfig;
use crate::error::BackendError;
use crate::metrics::ServerStats;

/// One server's breaker.
#[derive(Debug)]
pub(crate) struct Breaker {
    /// The pool's settings.
    config: BreakerConfig,
    /// Failures since the last success.
    failures: AtomicU32,
    /// Whether the server is out or half-open: the request path's one check.
    out: AtomicBool,
    /// Where the server stands; locked only off the fast path.
    state: Mutex<State>,
    /// Each ejection's reason, numbered: the server's connections watch it and fail what they
    /// have in flight when it is ejected (those requests would otherwise wait for the pool's
    /// `timeout`, and every client pipelining behind them with them).
    ejected: watch::Sender<(u64, Arc<str>)>,
    /// The ejections so far, read on the fast path: each request carries the count it was admitted
    /// at ([`Breaker::admit`]) and fails where it waits when the count has grown.
    ejections: AtomicU64,
}

/// Where a server stands with its breaker.
#[derive(Debug, Clone)]
enum State {
    /// Serving. `ejections`: how many ejections in a row, which the next one's length grows with;
    /// `since`: when it last came back.
    Closed {
        ejections: u32,
        since: Option<Instant>,
    },
    /// Ejected until `until`, for `reason`.
    Open {
        until: Instant,
        ejections: u32,
        reason: String,
    },
    /// The ejection is over and one request (sent at `probe`) finds out whether the server is back.
    HalfOpen {
        probe: Instant,
        ejections: u32,
        reason: String,
    },
}

impl Breaker {
    /// A closed breaker with `config`.
    pub(crate) fn new(config: BreakerConfig) -> Breaker {
        Breaker {
            config,
            failures: AtomicU32::new(0),
            out: AtomicBool::new(false),
            state: Mutex::new(State::Closed {
                ejections: 0,
                since: None,
            }),
            ejected: watch::Sender::new((0, Arc::from(""))),
            ejections: AtomicU64::new(0),
        }
    }

    /// The ejections, for a connection to fail its requests in flight when one happens.
    pub(crate) fn ejections(&self) -> watch::Receiver<(u64, Arc<str>)> {
        self.ejected.subscribe()
    }

    /// How many times the server has been ejected.
    pub(crate) fn ejections_now(&self) -> u64 {
        self.ejections.load(Relaxed)
    }

    /// Whether a request may be sent to the server (`addr`) now: not while it is ejected, nor while
    /// a probe is under way, nor beyond the pending cap. The refusal is the error to answer with,
    /// counted in `stats`.
    #[inline]
    pub(crate) fn admit(&self, stats: &ServerStats, addr: &str) -> Result<u64, BackendError> {
        // Read before the flag: a request that races an ejection counts as admitted before it.
        let ejections = self.ejections.load(Relaxed);
        if self.out.load(Relaxed) {
            self.admit_while_out(stats, addr)?;
        }
        let cap = u64::from(self.config.max_pending);
        if stats.in_queue.get() >= cap {
            stats.pending_overflows.inc();
            return Err(BackendError::Overloaded {
                addr: addr.to_owned(),
                pending: self.config.max_pending,
            });
        }
        Ok(ejections)
    }

    /// [`Breaker::admit`] while the server is out or half-open: the first request after the
    /// ejection is over is the probe; every other one is refused.
    #[cold]
    fn admit_while_out(&self, stats: &ServerStats, addr: &str) -> Result<(), BackendError> {
        let Ok(mut state) = self.state.lock() else {
            return Ok(());
        };
        let now = Instant::now();
        let refused = |reason: String| {
            stats.breaker_rejected.inc();
            Err(BackendError::CircuitOpen {
                addr: addr.to_owned(),
                reason,
            })
        };
        match &mut *state {
            State::Closed { .. } => Ok(()),
            State::Open {
                until,
                ejections,
                reason,
            } => {
                if now < *until {
                    let left = until.saturating_duration_since(now).as_millis();
                    return refused(format!("ejected for {left} ms more after {reason}"));
                }
                *state = State::HalfOpen {
                    probe: now,
                    ejections: *ejections,
                    reason: std::mem::take(reason),
                };
                Ok(())
            }
            State::HalfOpen { probe, reason, .. } => {
                // A probe whose outcome never came (no timeout and no `slow`) does not hold the
                // server out for ever: another one goes after the probe's time.
                if now.saturating_duration_since(*probe) >= self.probe_time() {
                    *probe = now;
                    return Ok(());
                }
                refused(format!("a probe request is testing it after {reason}"))
            }
        }
    }

    /// How long a probe may take before another one is sent.
    fn probe_time(&self) -> Duration {
        self.config.slow.unwrap_or(self.config.base_ejection)
    }

    /// A reply arrived `latency` after its request was written: a failure when slower than `slow`,
    /// else a success (which closes a half-open breaker).
    #[inline]
    pub(crate) fn reply(&self, stats: &ServerStats, pool: &str, latency: Duration) {
        if let Some(slow) = self.config.slow.filter(|s| latency > *s) {
            let cause = format_args!(
                "a reply took {} ms (slow: over {} ms)",
                latency.as_millis(),
                slow.as_millis()
            );
            self.failure(stats, pool, &cause);
            return;
        }
        self.success(stats, pool);
    }

    /// The server answered as it should (a reply in time, a health probe).
    pub(crate) fn success(&self, stats: &ServerStats, pool: &str) {
        // Read first, so the common case does not write a line shared between threads.
        if self.failures.load(Relaxed) != 0 {
            self.failures.store(0, Relaxed);
        }
        if self.out.load(Relaxed) {
            self.close(stats, pool);
        }
    }

    /// A request has waited `waited` for its reply, longer than `slow`: a failure now, while the
    /// server stalls.
    pub(crate) fn stalled(&self, stats: &ServerStats, pool: &str, waited: Duration) {
        let cause = format_args!("no reply within {} ms", waited.as_millis());
        self.failure(stats, pool, &cause);
    }

    /// The server failed (`cause`, without its address): ejects it after `consecutive_failures` in
    /// a row, or at once when this was its probe.
    pub(crate) fn failure(&self, stats: &ServerStats, pool: &str, cause: &dyn fmt::Display) {
        let n = self.failures.fetch_add(1, Relaxed).saturating_add(1);
        if !self.out.load(Relaxed) && n < self.config.consecutive_failures {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let now = Instant::now();
        let (ejections, reason) = match &*state {
            State::Open { .. } => return,
            State::Closed { .. } if n < self.config.consecutive_failures => return,
            State::Closed { ejections, since } => {
                // A server that served well for the longest ejection starts again from the first.
                let healthy = since
                    .is_some_and(|s| now.saturating_duration_since(s) >= self.config.max_ejection);
                let ejections = if healthy { 1 } else { ejections + 1 };
                (
                    ejections,
                    format!("{n} consecutive failures (the last: {cause})"),
                )
            }
            State::HalfOpen { ejections, .. } => {
                (ejections + 1, format!("its probe failed ({cause})"))
            }
        };
        let length = self.ejection(ejections);
        tracing::warn!(
            pool,
            server = %stats.name,
            reason = %reason,
            ejected_ms = length.as_millis() as u64,
            "circuit breaker open: the server's keys get a fast error until a probe passes"
        );
        let shared: Arc<str> = Arc::from(reason.as_str());
        *state = State::Open {
            until: now + length,
            ejections,
            reason,
        };
        // The count before the flag: a request admitted with the old count while the flag was
        // still clear fails where it waits.
        let n = self.ejections.fetch_add(1, Relaxed) + 1;
        self.ejected.send_modify(|(count, why)| {
            *count = n;
            *why = shared;
        });
        self.failures.store(0, Relaxed);
        self.out.store(true, Relaxed);
        stats.outlier_ejected.store(true, Relaxed);
        stats.outlier_ejections.inc();
    }

    /// The `k`th ejection in a row: the base time doubled `k - 1` times, at most the longest.
    fn ejection(&self, k: u32) -> Duration {
        let doubled = self
            .config
            .base_ejection
            .saturating_mul(1u32 << k.saturating_sub(1).min(20));
        doubled.min(self.config.max_ejection)
    }

    /// A success while out: closes the breaker if its probe was under way (a late reply from
    /// before the ejection leaves it out until its time is over).
    #[cold]
    fn close(&self, stats: &ServerStats, pool: &str) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if let State::HalfOpen { ejections, .. } = &*state {
            tracing::info!(
                pool,
                server = %stats.name,
                "circuit breaker closed: the server answered its probe"
            );
            *state = State::Closed {
                ejections: *ejections,
                since: Some(Instant::now()),
            };
            self.out.store(false, Relaxed);
            stats.outlier_ejected.store(false, Relaxed);
        }
    }

    /// The slow threshold, for the connections that watch for stalls.
    pub(crate) fn slow(&self) -> Option<Duration> {
        self.config.slow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> (Breaker, ServerStats) {
        let config = BreakerConfig {
            max_pending: 3,
            consecutive_failures: 2,
            slow: Some(Duration::from_millis(50)),
            base_ejection: Duration::from_millis(40),
            max_ejection: Duration::from_millis(100),
        };
        (Breaker::new(config), ServerStats::new("s"))
    }

    #[test]
    fn consecutive_failures_eject_and_a_success_between_them_resets_the_count() {
        let (b, stats) = breaker();
        b.failure(&stats, "p", &"boom");
        b.success(&stats, "p");
        b.failure(&stats, "p", &"boom");
        assert!(b.admit(&stats, "a:1").is_ok(), "one failure in a row");
        b.failure(&stats, "p", &"boom");
        let err = b.admit(&stats, "a:1").unwrap_err();
        assert!(
            err.to_string()
                .contains("2 consecutive failures (the last: boom)"),
            "{err}"
        );
        assert_eq!(stats.outlier_ejections.get(), 1);
        assert_eq!(stats.breaker_rejected.get(), 1);
    }

    #[test]
    fn after_the_ejection_one_probe_goes_and_its_success_closes_the_breaker() {
        let (b, stats) = breaker();
        b.failure(&stats, "p", &"x");
        b.failure(&stats, "p", &"x");
        std::thread::sleep(Duration::from_millis(45));
        assert!(b.admit(&stats, "a:1").is_ok(), "the probe");
        assert!(b.admit(&stats, "a:1").is_err(), "one probe at a time");
        b.reply(&stats, "p", Duration::from_millis(1));
        assert!(b.admit(&stats, "a:1").is_ok(), "closed");
        assert!(!stats.outlier_ejected.load(Relaxed));
    }

    #[test]
    fn a_failed_probe_ejects_again_for_twice_as_long_up_to_the_longest() {
        let (b, stats) = breaker();
        assert_eq!(b.ejection(1), Duration::from_millis(40));
        assert_eq!(b.ejection(2), Duration::from_millis(80));
        assert_eq!(b.ejection(3), Duration::from_millis(100));
        assert_eq!(b.ejection(40), Duration::from_millis(100));
        b.failure(&stats, "p", &"x");
        b.failure(&stats, "p", &"x");
        std::thread::sleep(Duration::from_millis(45));
        assert!(b.admit(&stats, "a:1").is_ok(), "the probe");
        b.stalled(&stats, "p", Duration::from_millis(60));
        let err = b.admit(&stats, "a:1").unwrap_err().to_string();
        assert!(
            err.contains("its probe failed (no reply within 60 ms)"),
            "{err}"
        );
        std::thread::sleep(Duration::from_millis(45));
        assert!(b.admit(&stats, "a:1").is_err(), "out for 80 ms this time");
        assert_eq!(stats.outlier_ejections.get(), 2);
    }

    #[test]
    fn a_slow_reply_is_a_failure_and_the_pending_cap_refuses_at_once() {
        let (b, stats) = breaker();
        b.reply(&stats, "p", Duration::from_millis(51));
        b.reply(&stats, "p", Duration::from_millis(70));
        assert!(b.admit(&stats, "a:1").is_err(), "two slow replies eject");
        let (b, stats) = breaker();
        stats.in_queue.set(3);
        let err = b.admit(&stats, "a:1").unwrap_err();
        assert_eq!(
            err,
            BackendError::Overloaded {
                addr: "a:1".into(),
                pending: 3
            }
        );
        assert_eq!(stats.pending_overflows.get(), 1);
        stats.in_queue.set(2);
        assert!(b.admit(&stats, "a:1").is_ok());
    }
}
