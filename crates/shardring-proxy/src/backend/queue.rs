//! A server connection's request queue: what the sessions of its worker send it, in order.
//!
//! One sender (the [`super::Backend`]) and one receiver (the connection's task), FIFO, unbounded (the
//! connection bounds what it takes per turn, and a session bounds what it has in flight). In place of a
//! tokio unbounded mpsc channel because the connection takes every queued request in one lock, then
//! hands them out without touching shared state again, and a send wakes the task only when the queue
//! was empty (it is awake, or about to be, otherwise). With requests from many clients arriving
//! between two turns of the connection, that made a proxied get and set cheaper in user-space
//! instructions, and the queue itself is a small part of a request's cost (BENCHMARKS.md, "proxy:
//! user-space cost per request", measured by `scripts/proxy-instructions`).
//!
//! A session and the connections it sends to run on one worker thread ([`crate::workers`]), so the
//! lock is not contended; it is a lock rather than a cell because tasks are `Send`.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

/// A new queue's two ends.
pub(super) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Mutex::new(State {
        items: VecDeque::new(),
        waker: None,
        sender_gone: false,
        receiver_gone: false,
    }));
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver {
            shared,
            taken: VecDeque::new(),
        },
    )
}

/// What both ends share.
#[derive(Debug)]
struct State<T> {
    /// Sent, not yet taken by the receiver.
    items: VecDeque<T>,
    /// The receiver's task, waiting for an item.
    waker: Option<Waker>,
    /// The sender was dropped: once `items` are taken, the receiver gets `None`.
    sender_gone: bool,
    /// The receiver was dropped: sends fail.
    receiver_gone: bool,
}

/// The sending end; dropping it ends the queue once its items are taken.
#[derive(Debug)]
pub(super) struct Sender<T> {
    /// Shared with the receiver.
    shared: Arc<Mutex<State<T>>>,
}

impl<T> Sender<T> {
    /// Queues `item`; gives it back when the receiver is gone.
    pub(super) fn send(&self, item: T) -> Result<(), T> {
        let mut s = lock(&self.shared);
        if s.receiver_gone {
            return Err(item);
        }
        s.items.push_back(item);
        if s.items.len() == 1 {
            // Waking schedules the receiver's task; it does not run it here.
            if let Some(w) = &s.waker {
                w.wake_by_ref();
            }
        }
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut s = lock(&self.shared);
        s.sender_gone = true;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

/// The receiving end, owned by the connection's task.
#[derive(Debug)]
pub(super) struct Receiver<T> {
    /// Shared with the sender.
    shared: Arc<Mutex<State<T>>>,
    /// Items taken from the shared queue in one go, handed out one by one.
    taken: VecDeque<T>,
}

impl<T> Receiver<T> {
    /// The next item; `None` once the sender is gone and every item was taken.
    pub(super) async fn recv(&mut self) -> Option<T> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next item, or (when there is none yet) wakes `cx`'s task when one is sent.
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(item) = self.taken.pop_front() {
            return Poll::Ready(Some(item));
        }
        let mut s = lock(&self.shared);
        if !s.items.is_empty() {
            std::mem::swap(&mut s.items, &mut self.taken);
            drop(s);
            return Poll::Ready(self.taken.pop_front());
        }
        if s.sender_gone {
            return Poll::Ready(None);
        }
        // Registered under the lock a send takes too, so a send cannot slip in unseen.
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The next item if one is queued.
    pub(super) fn try_recv(&mut self) -> Option<T> {
        if self.taken.is_empty() {
            let mut s = lock(&self.shared);
            std::mem::swap(&mut s.items, &mut self.taken);
        }
        self.taken.pop_front()
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // The items left are dropped here, outside the lock (a request's reply slot reads as removed).
        let left = {
            let mut s = lock(&self.shared);
            s.receiver_gone = true;
            std::mem::take(&mut s.items)
        };
        drop(left);
    }
}

/// The state, even after a panic elsewhere held the lock (each change is one step).
fn lock<T>(m: &Mutex<State<T>>) -> MutexGuard<'_, State<T>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn items_come_out_in_order_and_a_send_to_an_empty_queue_wakes_the_receiver() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let (tx, mut rx) = channel();
        assert!(rx.poll_recv(&mut cx).is_pending());
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            1,
            "one wake for the first send"
        );
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(1)));
        tx.send(3).unwrap();
        assert_eq!(rx.try_recv(), Some(2));
        assert_eq!(rx.try_recv(), Some(3));
        assert_eq!(rx.try_recv(), None);
        drop(tx);
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(None));
    }

    #[test]
    fn the_items_sent_before_the_sender_is_dropped_are_still_received() {
        let (tx, mut rx) = channel();
        tx.send("a").unwrap();
        drop(tx);
        assert_eq!(rx.try_recv(), Some("a"));
        assert_eq!(rx.try_recv(), None);
    }

    #[test]
    fn a_send_after_the_receiver_is_gone_gives_the_item_back() {
        let (tx, rx) = channel();
        drop(rx);
        assert_eq!(tx.send(7), Err(7));
    }
}
