//! A counting global allocator shared by the no-allocation tests: it wraps the system allocator and
//! counts every allocation, so a test can assert the count does not move across lookups.
//!
//! Each test binary that declares `mod support;` installs it as that binary's global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

#[allow(
    unsafe_code,
    reason = "a GlobalAlloc impl is unsafe by definition; it only forwards to System"
)]
// SAFETY: every method forwards its arguments unchanged to `System`, which upholds GlobalAlloc's contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the layout our caller gave, forwarded to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// How many allocations the process has made so far. Relaxed: tests read it on the thread that did the
/// lookups, so no other ordering is needed.
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}
