//! Where a server connection puts a request's reply: a slot of the client session's reply queue, or a
//! oneshot channel.
//!
//! A request needs no channel of its own: its session keeps one [`ReplyQueue`] for all of its requests
//! (those to one server, and each part of a fan-out), each request takes the next numbered slot of it,
//! and the server connection fills the slot ([`SlotSender`]). A fill wakes the session only when that
//! slot is awaited (the session writes answers in order, so it waits for one at a time). Against a
//! tokio oneshot per request, this saves the oneshot's heap allocation and its waker clones
//! (BENCHMARKS.md, "proxy: user-space cost per request", measured by `scripts/proxy-instructions`).
//!
//! Only futures polled by the session's own task may take slots (the queue wakes one task). Replies
//! awaited elsewhere (the follow-up copies a fan-out or a warm-up spawns as tasks of their own) and
//! the replica and warm-up retries keep a oneshot ([`ReplyTo::Once`]).
//!
//! A session and the server connections it sends to run on one worker thread ([`crate::workers`]), so
//! the queue's lock is never contended; it is a lock rather than a cell because tasks are `Send`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};

use tokio::sync::oneshot;

use crate::error::BackendError;
use crate::protocol::Reply;

/// Where one request's reply goes.
#[derive(Debug)]
pub(crate) enum ReplyTo {
    /// A slot of a session's [`ReplyQueue`].
    Slot(SlotSender),
    /// A oneshot channel, for replies awaited by a future of their own.
    Once(oneshot::Sender<Reply>),
}

impl ReplyTo {
    /// Delivers the reply (dropped when nobody waits for it any more). Inlined: every reply goes
    /// through it, and with two loops of a server connection calling it (with and without a
    /// circuit breaker) the compiler left it out of line, a call per reply.
    #[inline]
    pub(crate) fn send(self, reply: Reply) {
        match self {
            ReplyTo::Slot(slot) => slot.send(reply),
            ReplyTo::Once(tx) => {
                let _ = tx.send(reply);
            }
        }
    }
}

/// One client session's replies in flight, by slot number, oldest first. Clones are handles to the
/// same queue (for the session's fan-out futures).
///
/// Allocated on its first use, not when the session starts: a client that connects and sends nothing
/// costs no queue (idle clients are most of a busy proxy's connections).
#[derive(Debug, Default)]
pub(crate) struct ReplyQueue {
    /// Shared with the [`SlotSender`]s of the slots in flight; set on first use.
    shared: OnceLock<Arc<Mutex<Slots>>>,
}

impl Clone for ReplyQueue {
    /// A handle to the same queue (allocating it, if it was not yet).
    fn clone(&self) -> ReplyQueue {
        ReplyQueue {
            shared: OnceLock::from(Arc::clone(self.shared())),
        }
    }
}

/// The slots of a [`ReplyQueue`].
#[derive(Debug, Default)]
struct Slots {
    /// The number of the slot at the front of `slots`: the oldest not yet taken.
    first: u64,
    /// Every slot from `first` on, in number order (taken ones leave from the front).
    slots: VecDeque<Slot>,
    /// The session's task, to wake when an awaited slot is filled.
    waker: Option<Waker>,
}

/// One reply's place.
#[derive(Debug)]
enum Slot {
    /// Not in yet; `true` once the session waits for it (then its fill wakes the session).
    Waiting(bool),
    /// In, not taken.
    Filled(Reply),
    /// Taken (it leaves once every older slot is taken too).
    Taken,
}

impl ReplyQueue {
    /// The queue, allocated now if it was not yet.
    fn shared(&self) -> &Arc<Mutex<Slots>> {
        self.shared.get_or_init(Arc::default)
    }

    /// A new slot at the back: its number (for [`ReplyQueue::poll_take`]) and where its reply goes.
    pub(crate) fn slot(&self) -> (u64, SlotSender) {
        let mut s = lock(self.shared());
        let number = s.first + s.slots.len() as u64;
        s.slots.push_back(Slot::Waiting(false));
        let sender = SlotSender {
            queue: Some(Arc::clone(self.shared())),
            number,
        };
        (number, sender)
    }

    /// The reply of slot `number` (taken once; a slot taken already reads as
    /// [`BackendError::Removed`]); when it is not in yet, wakes `cx`'s task once it is.
    pub(crate) fn poll_take(&self, number: u64, cx: &mut Context<'_>) -> Poll<Reply> {
        let mut s = lock(self.shared());
        let Some(slot) = s.index(number).and_then(|i| s.slots.get_mut(i)) else {
            return Poll::Ready(Err(BackendError::Removed));
        };
        match std::mem::replace(slot, Slot::Taken) {
            Slot::Filled(reply) => {
                while let Some(Slot::Taken) = s.slots.front() {
                    s.slots.pop_front();
                    s.first += 1;
                }
                Poll::Ready(reply)
            }
            Slot::Taken => Poll::Ready(Err(BackendError::Removed)),
            Slot::Waiting(_) => {
                *slot = Slot::Waiting(true);
                // Registered under the lock that the fill takes too, so a fill cannot slip in unseen.
                match &s.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => s.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

impl Slots {
    /// Where slot `number` is in `slots`, if it was given out and has not left.
    fn index(&self, number: u64) -> Option<usize> {
        usize::try_from(number.checked_sub(self.first)?).ok()
    }
}

/// The filling end of one slot, carried with its request to the server connection. Dropped unfilled
/// (the connection went away with the request), it fills the slot with [`BackendError::Removed`], as a
/// dropped oneshot sender reads.
#[derive(Debug)]
pub(crate) struct SlotSender {
    /// The session's slots; `None` once filled.
    queue: Option<Arc<Mutex<Slots>>>,
    /// Which slot.
    number: u64,
}

impl SlotSender {
    /// Fills the slot.
    pub(crate) fn send(mut self, reply: Reply) {
        self.fill(reply);
    }

    fn fill(&mut self, reply: Reply) {
        let Some(queue) = self.queue.take() else {
            return;
        };
        let mut s = lock(&queue);
        // A slot is taken only once filled, so it is still in the queue.
        let Some(slot) = s.index(self.number).and_then(|i| s.slots.get_mut(i)) else {
            return;
        };
        let awaited = matches!(slot, Slot::Waiting(true));
        *slot = Slot::Filled(reply);
        if awaited {
            // Waking schedules the session's task; it does not run it here, so the lock is not taken
            // again underneath.
            if let Some(w) = &s.waker {
                w.wake_by_ref();
            }
        }
    }
}

impl Drop for SlotSender {
    fn drop(&mut self) {
        self.fill(Err(BackendError::Removed));
    }
}

/// The slots, even after a panic elsewhere held the lock (they stay consistent: each change is one
/// step).
fn lock(m: &Mutex<Slots>) -> MutexGuard<'_, Slots> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use bytes::Bytes;

    use super::*;

    fn take(q: &ReplyQueue, n: u64) -> Poll<Reply> {
        q.poll_take(n, &mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn replies_filled_out_of_order_are_taken_in_order() {
        let q = ReplyQueue::default();
        let (a, tx_a) = q.slot();
        let (b, tx_b) = q.slot();
        tx_b.send(Ok(Bytes::from_static(b"b")));
        assert!(
            take(&q, a).is_pending(),
            "the oldest slot is not filled yet"
        );
        tx_a.send(Ok(Bytes::from_static(b"a")));
        assert!(matches!(take(&q, a), Poll::Ready(Ok(r)) if &r[..] == b"a"));
        assert!(matches!(take(&q, b), Poll::Ready(Ok(r)) if &r[..] == b"b"));
    }

    #[test]
    fn slots_taken_out_of_order_leave_once_the_older_ones_are_taken() {
        let q = ReplyQueue::default();
        let (a, tx_a) = q.slot();
        let (b, tx_b) = q.slot();
        tx_b.send(Ok(Bytes::from_static(b"b")));
        assert!(matches!(take(&q, b), Poll::Ready(Ok(r)) if &r[..] == b"b"));
        assert!(matches!(
            take(&q, b),
            Poll::Ready(Err(BackendError::Removed))
        ));
        tx_a.send(Ok(Bytes::from_static(b"a")));
        assert!(matches!(take(&q, a), Poll::Ready(Ok(r)) if &r[..] == b"a"));
        assert!(lock(q.shared()).slots.is_empty());
        let (c, _tx_c) = q.slot();
        assert_eq!(c, 2);
    }

    #[test]
    fn only_a_fill_of_an_awaited_slot_wakes_the_session() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let q = ReplyQueue::default();
        let (a, tx_a) = q.slot();
        let (_, tx_b) = q.slot();
        assert!(q
            .poll_take(a, &mut Context::from_waker(&waker))
            .is_pending());
        tx_b.send(Ok(Bytes::new()));
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "nobody waits for b");
        tx_a.send(Ok(Bytes::new()));
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_sender_dropped_unfilled_reads_as_removed() {
        let q = ReplyQueue::default();
        let (a, tx) = q.slot();
        drop(tx);
        assert!(matches!(
            take(&q, a),
            Poll::Ready(Err(BackendError::Removed))
        ));
    }

    #[test]
    fn a_fill_after_the_session_is_gone_is_dropped() {
        let q = ReplyQueue::default();
        let (_, tx) = q.slot();
        let queue = Arc::downgrade(q.shared());
        drop(q);
        // The slot's sender still holds the queue...
        assert!(queue.upgrade().is_some());
        tx.send(Ok(Bytes::from_static(b"late")));
        // ...and the late fill frees it, reply and all: nothing waits for it, nothing leaks.
        assert!(queue.upgrade().is_none());
    }
}
