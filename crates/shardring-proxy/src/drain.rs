//! The signal that tells a pool's client sessions to stop reading and finish what they hold.
//!
//! A session waits for it beside its socket and its answers, so it is polled each time the session
//! wakes: twice per request. A `CancellationToken`'s future takes a lock on every poll (two locks, a
//! visible share of the proxy's CPU in a profile); here a poll is one atomic load, and the session's
//! waker is registered once, when it first waits, and again only if the task's waker changes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// A drain trigger: [`start`](Drain::start) once, and every [`watch`](Drain::watch) completes.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    /// Set before the watchers are woken, so a watch that checks it after registering misses nothing.
    started: AtomicBool,
    /// Wakes the registered watchers.
    notify: Notify,
}

impl Drain {
    /// Starts draining: every watch, present and future, completes.
    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether draining has started.
    pub(crate) fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// A future that completes once draining has started; poll it as often as you like.
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch {
            drain: self,
            notified: Box::pin(self.notify.notified()),
            registered: None,
        }
    }
}

/// Completes once its [`Drain`] has started.
#[derive(Debug)]
pub(crate) struct Watch<'a> {
    drain: &'a Drain,
    /// The registration in the trigger's waiter list (boxed: `Notified` must not move once polled).
    notified: Pin<Box<Notified<'a>>>,
    /// The waker the registration holds; a poll with the same one need not register again.
    registered: Option<Waker>,
}

impl Future for Watch<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.drain.started() {
            return Poll::Ready(());
        }
        if this
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        // First wait, or a new waker: (re-)register it. `notify_waiters` wakes a `Notified` once it has
        // been polled (or enabled); the flag is checked again after, so a start between the check above
        // and this registration is not missed.
        if this.notified.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        this.registered = Some(cx.waker().clone());
        if this.drain.started() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_waiting_watch_completes_when_the_drain_starts() {
        let drain = Arc::new(Drain::default());
        let waiter = tokio::spawn({
            let drain = Arc::clone(&drain);
            async move {
                let mut watch = std::pin::pin!(drain.watch());
                // Polled many times with the same waker before the start, as a session polls it.
                for _ in 0..3 {
                    assert!(futures_util::poll!(watch.as_mut()).is_pending());
                }
                watch.await;
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drain.start();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the watch completes")
            .unwrap();
    }

    #[tokio::test]
    async fn a_watch_made_or_first_polled_after_the_start_is_ready() {
        let drain = Drain::default();
        let early = drain.watch();
        drain.start();
        early.await;
        drain.watch().await;
        assert!(drain.started());
    }

    #[test]
    fn a_watch_registers_again_for_a_new_waker() {
        let drain = Drain::default();
        let mut watch = Box::pin(drain.watch());
        let (first, second) = (
            Arc::new(CountingWaker::default()),
            Arc::new(CountingWaker::default()),
        );
        let poll_with = |w: &Arc<CountingWaker>, watch: &mut Pin<Box<Watch<'_>>>| {
            let waker = Waker::from(Arc::clone(w));
            watch.as_mut().poll(&mut Context::from_waker(&waker))
        };
        assert!(poll_with(&first, &mut watch).is_pending());
        assert!(poll_with(&second, &mut watch).is_pending());
        drain.start();
        assert_eq!(
            second.woken.load(Ordering::SeqCst),
            1,
            "the latest waker is woken"
        );
        assert!(poll_with(&second, &mut watch).is_ready());
    }

    #[derive(Default)]
    struct CountingWaker {
        woken: std::sync::atomic::AtomicUsize,
    }

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.woken.fetch_add(1, Ordering::SeqCst);
        }
    }
}
