//! Which worker accepts a pool's next client: the proxy-wide cap (`client_connections`) and the spread
//! of clients over the workers that share the pool's listening socket.
//!
//! Every worker waits on the same socket ([`crate::workers`]), and the kernel wakes all of them for a
//! new client; the first to call `accept` gets it. Left alone, that is nearly always the same worker:
//! with two workers, one took every client of a load generator that connected them at once, leaving
//! the other idle. So a worker holding more clients than the least-loaded
//! worker does not accept until the others catch up (least connections, as nginx's and Envoy's load
//! balancers pick among upstreams). The least-loaded worker never waits, so a waiting client is always
//! taken by someone; a worker waits on a wake-up sent whenever a client of the pool comes or goes, so
//! it never spins. Clients keep their connections, so this costs a few atomics per connection, nothing
//! per request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// One pool's admission of clients over its workers.
#[derive(Debug)]
pub struct Admission {
    /// The pool's `client_connections`: one permit per client, over all workers.
    permits: Arc<Semaphore>,
    /// Clients connected now, by worker index.
    active: Vec<AtomicUsize>,
    /// Woken when a client comes or goes: a waiting worker checks whether it may accept again.
    changed: Notify,
}

/// A client's place: its permit and its count on its worker, given back when dropped.
#[derive(Debug)]
///
/// Kept by the client's session for its whole life, so it is small: the client's permit (its share
/// of `client_connections`) is held as a count in the admission's semaphore, not as a tokio permit of
/// its own (which would hold the semaphore a second time).
pub(crate) struct Admitted {
    /// The pool's admission, to count the client out and give its permit back.
    admission: Arc<Admission>,
    /// The client's worker.
    worker: u32,
}

impl Admission {
    /// Admission for `workers` workers, at most `cap` clients at once over all of them.
    pub(crate) fn new(workers: usize, cap: usize) -> Admission {
        Admission {
            permits: Arc::new(Semaphore::new(cap)),
            active: (0..workers.max(1)).map(|_| AtomicUsize::new(0)).collect(),
            changed: Notify::new(),
        }
    }

    /// Waits until worker `worker` may accept a client: a permit is free and no other worker has
    /// fewer clients. `None` once the permits are closed.
    pub(crate) async fn turn(self: &Arc<Self>, worker: usize) -> Option<OwnedSemaphorePermit> {
        loop {
            // Registered before the check, so a change between the check and the wait is not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.is_least_loaded(worker) {
                changed.await;
                continue;
            }
            // A worker that is not the least loaded holds no permit while it waits: at the cap, the
            // permit a leaving client frees must reach a worker that may accept.
            tokio::select! {
                permit = Arc::clone(&self.permits).acquire_owned() => {
                    let permit = permit.ok()?;
                    if self.is_least_loaded(worker) {
                        return Some(permit);
                    }
                }
                () = &mut changed => {}
            }
        }
    }

    /// Counts a client accepted by `worker` (with the permit [`turn`](Admission::turn) gave) until the
    /// returned place is dropped.
    pub(crate) fn admit(self: &Arc<Self>, worker: usize, permit: OwnedSemaphorePermit) -> Admitted {
        if let Some(n) = self.active.get(worker) {
            // Relaxed: a count read by other workers' balance checks only; a stale read costs one
            // client placed a little unevenly, never a lost one.
            n.fetch_add(1, Ordering::Relaxed);
        }
        self.changed.notify_waiters();
        permit.forget();
        Admitted {
            admission: Arc::clone(self),
            worker: u32::try_from(worker).unwrap_or(u32::MAX),
        }
    }

    /// Clients connected now, by worker index.
    pub fn active(&self) -> Vec<usize> {
        self.active
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    fn is_least_loaded(&self, worker: usize) -> bool {
        let Some(mine) = self.active.get(worker).map(|n| n.load(Ordering::Relaxed)) else {
            return true;
        };
        self.active
            .iter()
            .all(|n| n.load(Ordering::Relaxed) >= mine)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(n) = self.admission.active.get(self.worker as usize) {
            n.fetch_sub(1, Ordering::Relaxed);
        }
        self.admission.permits.add_permits(1);
        self.admission.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn ready(turn: impl std::future::Future<Output = Option<OwnedSemaphorePermit>>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), turn)
            .await
            .is_ok()
    }

    /// A client admitted on `worker`, once its turn comes.
    async fn place(a: &Arc<Admission>, worker: usize) -> Admitted {
        let p = a.turn(worker).await.unwrap();
        a.admit(worker, p)
    }

    #[tokio::test]
    async fn a_worker_ahead_of_the_others_waits_until_they_catch_up() {
        let a = Arc::new(Admission::new(2, 100));
        let first = place(&a, 0).await;
        assert!(!ready(a.turn(0)).await, "worker 0 holds more clients");
        let second = place(&a, 1).await;
        assert_eq!(a.active(), vec![1, 1]);
        let p = a.turn(0).await.unwrap();
        drop(p);
        // A client leaving worker 1 makes worker 0 wait again; one leaving worker 0 wakes it.
        drop(second);
        assert!(!ready(a.turn(0)).await);
        let waiting = tokio::spawn({
            let a = Arc::clone(&a);
            async move { a.turn(0).await.is_some() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap());
    }

    /// At the cap, a client leaving the less loaded side must not have its permit taken by a worker
    /// that then may not accept (it was held while waiting, and no one accepted again).
    #[tokio::test]
    async fn at_the_cap_a_freed_place_goes_to_a_worker_that_may_accept() {
        let a = Arc::new(Admission::new(2, 2));
        let on_0 = place(&a, 0).await;
        let _on_1 = place(&a, 1).await;
        // Worker 1 waits first (first in the permits' queue), then worker 0.
        let mut waiting = Vec::new();
        for w in [1, 0] {
            let a = Arc::clone(&a);
            waiting.push(tokio::spawn(async move { a.turn(w).await.is_some() }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(on_0);
        let done = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(i) = waiting.iter().position(|t| t.is_finished()) {
                    return i;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("a worker gets the freed place");
        assert_eq!(done, 1, "worker 0, the one with fewer clients, takes it");
        for t in waiting {
            t.abort();
        }
    }

    #[tokio::test]
    async fn the_cap_counts_clients_of_every_worker() {
        let a = Arc::new(Admission::new(2, 2));
        let _x = place(&a, 0).await;
        let y = place(&a, 1).await;
        assert!(!ready(a.turn(1)).await, "both permits held");
        drop(y);
        assert!(ready(a.turn(1)).await);
    }
}
