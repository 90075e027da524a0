//! Proves the lookup path allocates nothing: a counting global allocator wraps the system one, and the
//! count must not move across many lookups (with and without the index, on every hash).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use shardring::{HashFunction, Placement, Ring};

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

#[test]
fn lookups_do_not_allocate() {
    let keys: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("user:{i}:profile").into_bytes())
        .collect();
    for &hash in HashFunction::ALL {
        for index in [true, false] {
            let ring = Ring::builder()
                .hash(hash)
                .lookup_index(index)
                .nodes((0..50).map(|i| format!("10.0.0.{i}:11211")))
                .build()
                .unwrap();
            let placement: &dyn Placement = &ring;
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            let mut found = 0usize;
            for _ in 0..20 {
                for key in &keys {
                    found += usize::from(ring.lookup(key).is_some());
                    found += usize::from(placement.locate(key).is_some());
                    // Up to 8 replicas are remembered inline.
                    found += ring.replicas(key).take(3).count();
                }
            }
            let after = ALLOCATIONS.load(Ordering::Relaxed);
            assert_eq!(found, 20 * 1000 * 5);
            assert_eq!(
                after, before,
                "{hash} (index {index}) allocated during lookups"
            );
        }
    }
}
