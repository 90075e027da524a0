//! A hint that a cache line will be read soon, so a batch of lookups can start every key's cache miss
//! before waiting for any of them (see [`Ring::lookup_many`](super::Ring::lookup_many)).
//!
//! On x86-64 this is `prefetcht0`, which asks for the line without waiting for it and without holding up
//! the instructions after it; a plain load would do the same work but keep the CPU's reorder buffer
//! waiting on the miss. Elsewhere it does nothing, and a batch still overlaps its misses by loading every
//! key's index entry in one tight loop before it searches.

/// Asks the CPU to bring the cache line holding `items[i]` into every cache level. Never faults, never
/// changes what the program computes, and does not check that `i` is in bounds: a prefetch of an
/// address past the slice asks for a line nobody reads. The passes of a batch prefetch twice a key
/// and are bound by their instructions once the lines arrive in time, so the bounds check (a compare
/// and a branch) is left out.
#[inline(always)]
pub(crate) fn prefetch_item<T>(items: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    x86::prefetch_t0(items.as_ptr().wrapping_add(i).cast());
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, i);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};

    /// `prefetcht0 [address]`.
    #[inline(always)]
    #[allow(
        unsafe_code,
        reason = "_mm_prefetch is a target-feature function, callable only from unsafe code even though \
                  SSE is part of x86-64; batched lookups measured faster with it than with plain loads \
                  (ring/mod.rs, lookup_many)"
    )]
    pub(super) fn prefetch_t0(address: *const i8) {
        // SAFETY:
        // 1. `_mm_prefetch` requires SSE, which every x86-64 CPU has (it is in the target's baseline
        //    features, so this code is never built for a CPU without it).
        // 2. A prefetch is a hint: it never dereferences `address` architecturally, cannot fault on any
        //    address, and writes nothing; it only may fill a cache line. So any address is sound, even
        //    one past the end of a slice (`prefetch_item` does not check its index).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(address) }
    }
}
