//! Where a server connection puts a request's reply: a slot of the client session's reply queue, or a
//! oneshot channel.
//!
//! Most requests go to one server and are answered from that one reply. They need no channel of their
//! own: the session keeps one [`ReplyQueue`] for all of its requests, each such request takes the next
//! numbered slot of it, and the server connection fills the slot ([`SlotSender`]). The session writes
//! answers in request order, so it only ever waits for its oldest slot, and a fill wakes it only when
//! that is the slot filled. Against a tokio oneshot per request, this saves the oneshot's heap
//! allocation and its waker clones (callgrind, `scripts/proxy-instructions`: BENCHMARKS.md, "proxy:
//! user-space cost per request (#16)"). Fan-outs, failovers and fire-and-forget copies, which await
//! their replies in futures of their own, keep a oneshot ([`ReplyTo::Once`]).
//!
//! A session and the server connections it sends to run on one worker thread ([`crate::workers`]), so
//! the queue's lock is never contended; it is a lock rather than a cell because tasks are `Send`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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
    /// Delivers the reply (dropped when nobody waits for it any more).
    pub(crate) fn send(self, reply: Reply) {
        match self {
            ReplyTo::Slot(slot) => slot.send(reply),
            ReplyTo::Once(tx) => {
                let _ = tx.send(reply);
            }
        }
    }
}

/// One client session's replies in flight, by slot number, oldest first.
#[derive(Debug, Default)]
pub(crate) struct ReplyQueue {
    /// Shared with the [`SlotSender`]s of the slots in flight.
    shared: Arc<Mutex<Slots>>,
}

/// The slots of a [`ReplyQueue`].
#[derive(Debug, Default)]
struct Slots {
    /// The number of the slot at the front of `slots`: the oldest not yet taken.
    first: u64,
    /// Every slot given out and not yet taken, in number order: `None` until its reply is in.
    slots: VecDeque<Option<Reply>>,
    /// The session's task, to wake when the front slot is filled.
    waker: Option<Waker>,
}

impl ReplyQueue {
    /// A new slot at the back: its number (for [`ReplyQueue::poll_take`]) and where its reply goes.
    pub(crate) fn slot(&self) -> (u64, SlotSender) {
        let mut s = lock(&self.shared);
        let number = s.first + s.slots.len() as u64;
        s.slots.push_back(None);
        let sender = SlotSender {
            queue: Some(Arc::clone(&self.shared)),
            number,
        };
        (number, sender)
    }

    /// The reply of slot `number`, which must be the oldest slot not taken (answers are taken in
    /// order); when it is not in yet, wakes `cx`'s task once it is.
    pub(crate) fn poll_take(&self, number: u64, cx: &mut Context<'_>) -> Poll<Reply> {
        let mut s = lock(&self.shared);
        debug_assert_eq!(number, s.first, "reply slots are taken oldest first");
        if let Some(Some(_)) = s.slots.front() {
            let reply = s.slots.pop_front().flatten();
            s.first += 1;
            return Poll::Ready(reply.unwrap_or(Err(BackendError::Removed)));
        }
        // Registered under the lock that the fill takes too, so a fill cannot slip in unseen.
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
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
        let Some(at) = self
            .number
            .checked_sub(s.first)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        if let Some(slot) = s.slots.get_mut(at) {
            *slot = Some(reply);
        }
        if at == 0 {
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
        assert!(take(&q, a).is_pending(), "the oldest slot is not filled yet");
        tx_a.send(Ok(Bytes::from_static(b"a")));
        assert!(matches!(take(&q, a), Poll::Ready(Ok(r)) if &r[..] == b"a"));
        assert!(matches!(take(&q, b), Poll::Ready(Ok(r)) if &r[..] == b"b"));
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
        drop(q);
        tx.send(Ok(Bytes::from_static(b"late")));
    }
}
