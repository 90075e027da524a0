//! Heap bytes held by every benchmarked implementation, measured by a counting allocator, as JSON
//! lines for `scripts/bench-report`; with `--notes`, the peers' configuration notes instead.
//!
//! Each structure is built after its inputs (node names, addresses) exist, and the bytes it holds
//! are the live heap after the build minus the live heap before: temporaries of the build are not
//! counted, and neither are the node names the peers borrow (`&'static str`). Our placements own
//! copies of their node names, which are counted (about 40 bytes a node).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use shardring::HashFunction;
use shardring_bench::peers::{self, NOTES};
use shardring_bench::{node_names, ours, NODE_COUNTS, VNODES};

/// Forwards to the system allocator and keeps a count of the bytes currently allocated.
struct Counting;

/// Bytes currently allocated. Relaxed: the program is single-threaded, and the count is only read
/// between allocations on the same thread.
static LIVE: AtomicUsize = AtomicUsize::new(0);

#[allow(
    unsafe_code,
    reason = "counting heap bytes means implementing GlobalAlloc, an unsafe trait; this binary only \
              measures memory, it is not part of the library or of any timed benchmark"
)]
// SAFETY: 1. every method forwards the caller's layout and pointer unchanged to `System`, which
// upholds GlobalAlloc's contract; 2. the only other effect is an atomic add or subtract on a counter,
// which neither allocates nor touches the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed through unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through here).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The live heap bytes that `build`'s result holds.
fn held<T>(build: impl FnOnce() -> T) -> (usize, T) {
    let before = LIVE.load(Ordering::Relaxed);
    let value = build();
    let after = LIVE.load(Ordering::Relaxed);
    (after.saturating_sub(before), value)
}

fn json_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn emit(
    name: &str,
    peer: bool,
    nodes: usize,
    heap: usize,
    structure: Option<usize>,
    points: Option<usize>,
) {
    let opt = |v: Option<usize>| v.map_or("null".to_string(), |v| v.to_string());
    println!(
        "{{\"impl\":{},\"peer\":{peer},\"nodes\":{nodes},\"heap_bytes\":{heap},\"structure_bytes\":{},\"points\":{}}}",
        json_string(name),
        opt(structure),
        opt(points)
    );
}

fn main() {
    if std::env::args().any(|a| a == "--notes") {
        for p in NOTES {
            println!(
                "{{\"impl\":{},\"family\":{},\"hash\":{},\"note\":{}}}",
                json_string(p.name),
                json_string(p.family.name()),
                json_string(p.hash),
                json_string(p.note)
            );
        }
        return;
    }
    for nodes in NODE_COUNTS {
        let names = node_names(nodes);
        for (label, hash, index) in [
            ("shardring-ring", HashFunction::Xxh3, true),
            ("shardring-ring-bsearch", HashFunction::Xxh3, false),
        ] {
            let (heap, ring) = held(|| ours::ring(names, hash, index));
            emit(
                label,
                false,
                nodes,
                heap,
                Some(ring.memory_bytes()),
                Some(ring.point_count()),
            );
        }
        let (heap, ring) = held(|| ours::ring_with_lines(names));
        emit(
            "shardring-ring-lines",
            false,
            nodes,
            heap,
            Some(ring.memory_bytes()),
            Some(ring.point_count()),
        );
        let members = ours::nodes(names);
        for algorithm in ours::algorithms() {
            let (heap, placement) = held(|| ours::build(algorithm, &members));
            let structure = placement.0.memory_bytes();
            emit(
                &ours::impl_name(algorithm),
                false,
                nodes,
                heap,
                Some(structure),
                None,
            );
        }
        drop(members);

        let buckets = peers::Pingora::buckets(names);
        let (heap, ring) = held(|| peers::Pingora::build(&buckets));
        drop(ring);
        emit(
            "pingora-ketama",
            true,
            nodes,
            heap,
            None,
            Some(nodes * VNODES as usize),
        );
        drop(buckets);
        let (heap, ring) = held(|| peers::HashRing::build(names));
        drop(ring);
        emit(
            "hashring",
            true,
            nodes,
            heap,
            None,
            Some(nodes * VNODES as usize),
        );
        let (heap, ring) = held(|| peers::ConHash::build(names));
        drop(ring);
        emit(
            "conhash",
            true,
            nodes,
            heap,
            None,
            Some(nodes * VNODES as usize),
        );
        if nodes <= peers::peer("consistent_hash_ring").max_nodes {
            let (heap, ring) = held(|| peers::ConsistentHashRing::build(names));
            drop(ring);
            emit(
                "consistent_hash_ring",
                true,
                nodes,
                heap,
                None,
                Some(nodes * VNODES as usize),
            );
        }
        let (heap, ring) = held(|| peers::MpcHash::build(names));
        drop(ring);
        emit("mpchash", true, nodes, heap, None, Some(nodes));
        let (heap, _jump) = held(|| peers::JumpHash::build(nodes));
        emit("jumphash", true, nodes, heap, None, None);
        if nodes <= peers::peer("maglev").max_nodes {
            let table = peers::MaglevPeer::table_size(nodes);
            let (heap, maglev) = held(|| peers::MaglevPeer::build(names, table));
            drop(maglev);
            emit("maglev", true, nodes, heap, None, None);
        }
        let (heap, anchor) = held(|| peers::AnchorPeer::build(nodes));
        drop(anchor);
        emit("anchorhash", true, nodes, heap, None, None);
        let (heap, rv) = held(|| peers::RendezvousPeer::build(names));
        drop(rv);
        emit("rendezvous_hash", true, nodes, heap, None, None);
    }
}
