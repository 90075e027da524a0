//! A counting global allocator shared by the no-allocation tests: it wraps the system allocator and
//! counts every allocation of the calling thread, so a test can assert the count does not move across
//! its lookups. Per thread, because the test harness allocates on its own threads meanwhile.
//!
//! Declared once, in `main.rs`: it is the global allocator of the whole test binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// This thread's allocations. `const`-initialised with no destructor, so reaching it never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

#[allow(
    unsafe_code,
    reason = "a GlobalAlloc impl is unsafe by definition; it only forwards to System"
)]
// SAFETY: every method forwards its arguments unchanged to `System`, which upholds GlobalAlloc's contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // A thread being torn down has no counter any more; its allocations are not the test's.
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
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

/// How many allocations the calling thread has made so far.
pub fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}
