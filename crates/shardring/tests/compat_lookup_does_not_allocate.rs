//! The compatibility rings keep the library's promise that a lookup never allocates: hash tags, the
//! twemproxy and libhashkit hashes, uhashring's shifted position and libketama's NUL cut all work on
//! borrowed slices. Same counting allocator as `lookup_does_not_allocate.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use shardring::compat::twemproxy::{placement, Distribution, TwemproxyServer};
use shardring::compat::CompatMode;
use shardring::hash::TwemproxyHash;
use shardring::Placement;

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

fn assert_no_allocation(what: &str, p: &dyn Placement, keys: &[Vec<u8>]) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut found = 0usize;
    for key in keys {
        found += usize::from(p.lookup(key).is_some());
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(found, keys.len(), "{what}");
    assert_eq!(after, before, "{what} allocated during lookups");
}

#[test]
fn compat_lookups_do_not_allocate() {
    let keys: Vec<Vec<u8>> = (0..2000)
        .map(|i| format!("{{user{}}}:{i}:\u{e9}", i % 7).into_bytes())
        .chain([Vec::new(), b"a\0b".to_vec()])
        .collect();
    let nodes: Vec<String> = (0..20)
        .map(|i| format!("10.0.0.{i}:1121{}", i % 3))
        .collect();
    let list: Vec<(&str, f64)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), 1.0 + (i % 3) as f64))
        .collect();
    for &mode in CompatMode::ALL {
        let ring = mode.build(&list, None).unwrap();
        assert_no_allocation(mode.name(), &ring, &keys);
    }
    let servers: Vec<TwemproxyServer> = nodes
        .iter()
        .map(|n| format!("{n}:2").parse().unwrap())
        .collect();
    for &hash in TwemproxyHash::ALL {
        for distribution in [Distribution::Ketama, Distribution::Modula] {
            let p = placement(&servers, hash, Some(*b"{}"), distribution).unwrap();
            assert_no_allocation(&format!("twemproxy {hash} {distribution}"), &*p, &keys);
        }
    }
}
