//! Proves that `locate` allocates nothing for every algorithm: a counting global allocator wraps the
//! system one, and the count must not move across many lookups, on every hash, before and after a
//! membership change (memento and anchor take another path once a node is removed).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use shardring::algo::{build, Algorithm, AlgorithmOptions};
use shardring::{HashFunction, Node};

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
fn algorithm_lookups_do_not_allocate() {
    let keys: Vec<Vec<u8>> = (0..500)
        .map(|i| format!("user:{i}:profile").into_bytes())
        .collect();
    let nodes: Vec<Node> = (0..50)
        .map(|i| Node::new(format!("10.0.0.{i}:11211")).unwrap())
        .collect();
    for &hash in HashFunction::ALL {
        let mut options = AlgorithmOptions::default();
        options.hash = hash;
        for &algorithm in Algorithm::ALL {
            let mut placement = build(algorithm, &nodes, &options).unwrap();
            for round in 0..2 {
                let before = ALLOCATIONS.load(Ordering::Relaxed);
                let mut found = 0usize;
                for key in &keys {
                    found += usize::from(placement.locate(key).is_some());
                    found += usize::from(placement.lookup(key).is_some());
                }
                let after = ALLOCATIONS.load(Ordering::Relaxed);
                assert_eq!(found, 2 * keys.len());
                assert_eq!(
                    after, before,
                    "{algorithm} with {hash} allocated (round {round})"
                );
                if round == 0 {
                    placement.remove("10.0.0.17:11211").unwrap();
                }
            }
        }
    }
}
