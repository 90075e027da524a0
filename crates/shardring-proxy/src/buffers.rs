//! The client sessions' read and write buffers: lent from a per-worker free list while a session has
//! bytes to hold, given back when it has none.
//!
//! twemproxy's users run it with tens of thousands of mostly idle clients (PHP workers, serverless
//! functions). A buffer of its own for each connection, allocated at accept and kept for its life,
//! made an idle client cost many times nutcracker's (BENCHMARKS.md, "proxy: memory
//! per client connection"). So a session holds a buffer only while it has bytes in one: an idle
//! session holds none, reads its next request into a small stack buffer first
//! ([`crate::session`]), and takes a buffer from this list only when bytes arrive.
//!
//! The list is per worker thread (a thread-local): a session and everything it does run on one
//! worker's thread ([`crate::workers`]), so taking and giving back is a `Vec` pop and push, with no
//! lock and no allocation on the request path once the list is warm. It is bounded: at most
//! [`MAX_FREE`] buffers are kept, so memory goes back to the allocator when clients leave; a buffer
//! that grew past [`MAX_KEPT_CAPACITY`] (a large value) is freed rather than kept.

use std::cell::RefCell;

use bytes::BytesMut;

/// The capacity a buffer is lent with: a whole request or reply of common sizes fits, and a read
/// this large is the kernel's usual socket chunk.
pub(crate) const BUFFER_CAPACITY: usize = 16 << 10;

/// The most buffers a worker keeps free: enough for bursts of that many clients active at once
/// without going to the allocator, small enough (at most `MAX_FREE` × [`MAX_KEPT_CAPACITY`] bytes)
/// that it is not the memory clients leave behind.
const MAX_FREE: usize = 64;

/// A buffer that grew past this (to hold a large value) goes back to the allocator, not to the list.
const MAX_KEPT_CAPACITY: usize = 4 * BUFFER_CAPACITY;

/// The room a buffer lent again has at least. A read buffer comes back with its front used (the
/// requests split off it); while this much is left past that front, it is kept as it is, and
/// reclaimed (its front made usable again) only once less is: one reclaim for many requests
/// rather than one each (BENCHMARKS.md, "proxy: memory per client connection").
pub(crate) const MIN_ROOM: usize = BUFFER_CAPACITY / 2;

thread_local! {
    /// This worker's free buffers, each empty, with room for at least [`MIN_ROOM`] bytes.
    static FREE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least [`MIN_ROOM`] bytes: a free one of this worker's, else a new
/// one of [`BUFFER_CAPACITY`].
pub(crate) fn take() -> BytesMut {
    FREE.with_borrow_mut(Vec::pop)
        .unwrap_or_else(|| BytesMut::with_capacity(BUFFER_CAPACITY))
}

/// Gives `buf` back: kept for the next [`take`] when it has [`MIN_ROOM`] left or can be made whole
/// again (no request or reply split off it is still alive elsewhere), is not too large, and the list
/// is not full; else freed. Its bytes, if any, are dropped: give back only a buffer whose bytes have
/// been used.
///
/// A buffer kept with its front still shared (a request split off it, still on its way to a server)
/// is safe to lend again: a `BytesMut` owns the room past its front, and the allocation is freed
/// only once both are dropped.
pub(crate) fn give(mut buf: BytesMut) {
    buf.clear();
    if buf.capacity() > MAX_KEPT_CAPACITY {
        return;
    }
    // `try_reclaim` succeeds only when no `Bytes` split off the buffer is alive: a buffer short of
    // room and still shared with a request in flight is dropped here, and freed with that request.
    if buf.capacity() < MIN_ROOM && !buf.try_reclaim(BUFFER_CAPACITY) {
        return;
    }
    FREE.with_borrow_mut(|free| {
        if free.len() < MAX_FREE {
            free.push(buf);
        }
    });
}

/// How many buffers this thread keeps free (for tests).
#[cfg(test)]
pub(crate) fn free_count() -> usize {
    FREE.with_borrow(Vec::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lent buffer with less than [`MIN_ROOM`] left past a request split off its front, and that
    /// request.
    fn short_of_room() -> (BytesMut, bytes::Bytes) {
        let mut buf = take();
        let used = buf.capacity() - MIN_ROOM + 1;
        buf.extend_from_slice(&vec![b'k'; used]);
        let request = buf.split_to(used).freeze();
        (buf, request)
    }

    #[test]
    fn a_buffer_given_back_whole_is_lent_again() {
        let before = free_count();
        let mut buf = take();
        buf.extend_from_slice(b"get k\r\n");
        let ptr = buf.as_ptr();
        give(buf);
        assert_eq!(free_count(), before + 1);
        let again = take();
        assert_eq!(again.as_ptr(), ptr, "the same allocation, lent again");
        assert!(again.is_empty());
        assert!(again.capacity() >= BUFFER_CAPACITY);
        give(again);
    }

    #[test]
    fn a_buffer_with_room_is_kept_as_it_is_and_its_lent_front_stays_intact() {
        let before = free_count();
        let mut buf = take();
        buf.extend_from_slice(b"get k\r\n");
        let request = buf.split_to(7).freeze();
        give(buf);
        assert_eq!(
            free_count(),
            before + 1,
            "room enough left past the request"
        );
        let mut again = take();
        assert!(again.capacity() >= MIN_ROOM);
        again.extend_from_slice(&[b'x'; 64]);
        assert_eq!(
            &request[..],
            b"get k\r\n",
            "the request split off is not written over"
        );
        give(again);
    }

    #[test]
    fn a_buffer_short_of_room_and_shared_with_a_request_in_flight_is_not_kept() {
        let before = free_count();
        let (buf, request) = short_of_room();
        give(buf);
        assert_eq!(free_count(), before, "still shared with the request");
        assert!(request.len() > BUFFER_CAPACITY - MIN_ROOM);
    }

    #[test]
    fn a_buffer_short_of_room_is_reclaimed_whole_and_kept() {
        let before = free_count();
        let (buf, request) = short_of_room();
        drop(request);
        give(buf);
        assert_eq!(free_count(), before + 1);
        let again = take();
        assert!(again.capacity() >= BUFFER_CAPACITY);
        give(again);
    }

    #[test]
    fn large_buffers_and_a_full_list_go_back_to_the_allocator() {
        let before = free_count();
        give(BytesMut::with_capacity(MAX_KEPT_CAPACITY + 1));
        assert_eq!(free_count(), before);
        give(BytesMut::new());
        assert_eq!(free_count(), before);
        for _ in 0..MAX_FREE + 10 {
            give(BytesMut::with_capacity(BUFFER_CAPACITY));
        }
        assert_eq!(free_count(), MAX_FREE);
    }
}
