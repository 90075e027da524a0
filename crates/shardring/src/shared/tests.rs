use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};

use super::*;

fn ring(names: &[&str]) -> Ring {
    Ring::builder()
        .vnodes(40)
        .nodes(names.iter().copied())
        .build()
        .unwrap()
}

fn names(p: &Ring) -> BTreeSet<String> {
    p.nodes().iter().map(|n| n.name().to_string()).collect()
}

#[test]
fn changes_publish_new_generations() {
    let shared = SharedRing::new(ring(&["a", "b"]));
    let before = shared.snapshot();
    shared.add(Node::new("c").unwrap()).unwrap();
    shared.set_weight("a", 2.0).unwrap();
    assert_eq!(shared.remove("b").unwrap().name(), "b");
    assert_eq!(shared.generation(), 3);
    // The old snapshot is untouched.
    assert_eq!(before.generation(), 0);
    assert_eq!(names(&before), names(&ring(&["a", "b"])));
    assert_eq!(names(&shared.load()), names(&ring(&["a", "c"])));
    // A failed change publishes nothing.
    assert!(matches!(
        shared.remove("zz"),
        Err(Error::UnknownNode { .. })
    ));
    assert_eq!(shared.generation(), 3);
    assert_eq!(shared.replace(ring(&["x"])), 4);
    assert_eq!(
        shared.lookup_with("k", |n| n.name().to_string()).unwrap(),
        "x"
    );
}

#[test]
fn counted_lookups_feed_load_stats_and_reset_on_publish() {
    let shared = SharedRing::new(ring(&["a", "b", "c"]));
    for i in 0..3000 {
        shared.load().lookup_counted(format!("key:{i}")).unwrap();
    }
    let stats = shared.load_stats();
    assert_eq!(stats.total, 3000.0);
    assert!(stats.peak_to_mean >= 1.0);
    shared.reset_load();
    assert_eq!(shared.load_stats().total, 0.0);
    shared.load().lookup_counted("k");
    shared.add(Node::new("d").unwrap()).unwrap();
    assert_eq!(shared.load_stats().total, 0.0);
    assert_eq!(shared.load_stats().loads.len(), 4);
}

#[test]
fn empty_shared_ring_answers_none() {
    let shared: SharedRing = SharedRing::default();
    assert!(shared.load().lookup("k").is_none());
    assert!(shared.load().lookup_counted("k").is_none());
}

/// Every node name the stress test uses, so readers can record an answer as a byte.
const NAMES: [&str; 12] = [
    "base-0", "base-1", "a-0", "a-1", "a-2", "a-3", "a-4", "b-0", "b-1", "b-2", "b-3", "b-4",
];

fn node_id(name: &str) -> u8 {
    NAMES.iter().position(|n| *n == name).expect("a known name") as u8
}

/// Readers on every core while two writers add and remove nodes in a loop. Every answer must be a node of
/// the snapshot generation it came from (as the writer that published it recorded it), and no writer's
/// change may be lost. Bounded by iteration counts, not by time.
#[test]
fn stress_readers_never_see_a_foreign_node_and_no_update_is_lost() {
    const WRITER_OPS: usize = 150;
    /// A safety cap only: readers stop soon after the writers finish.
    const READER_MAX_LOOKUPS: usize = 20_000_000;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let shared = SharedRing::new(ring(&["base-0", "base-1"]));
    let published: Mutex<HashMap<u64, BTreeSet<String>>> = Mutex::new(HashMap::new());
    published.lock().unwrap().insert(0, names(&shared.load()));
    let writers_done = AtomicBool::new(false);
    // Readers bump this as they go; writers wait for it to move after each publish, so that readers and
    // writers overlap however the machine schedules them.
    let progress = AtomicU64::new(0);
    let readers_left = AtomicUsize::new(cores);
    let start = Barrier::new(cores + 2);

    let (answers, finals) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..cores)
            .map(|r| {
                let (shared, done, start, progress, left) =
                    (&shared, &writers_done, &start, &progress, &readers_left);
                s.spawn(move || {
                    let mut seen = Vec::new();
                    start.wait();
                    for i in 0..READER_MAX_LOOKUPS {
                        // Relaxed: the flag only ends the loop early; nothing is read through it.
                        if done.load(Ordering::Relaxed) && i > 1000 {
                            break;
                        }
                        let snap = shared.load();
                        let key = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ r as u64;
                        let node = snap.lookup_counted(key.to_le_bytes()).expect("never empty");
                        if i % 7 == 0 {
                            seen.push((snap.generation(), node_id(node.name())));
                            // Relaxed: a progress hint for the writers, no data is read through it.
                            progress.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    left.fetch_sub(1, Ordering::Relaxed);
                    seen
                })
            })
            .collect();
        let writers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|prefix| {
                let (shared, published, start, progress, readers_left) =
                    (&shared, &published, &start, &progress, &readers_left);
                s.spawn(move || {
                    let mut present = BTreeSet::new();
                    start.wait();
                    for op in 0..WRITER_OPS {
                        let name = format!("{prefix}-{}", op % 5);
                        let writer = shared.writer();
                        let mut next = writer.current().placement().clone();
                        if present.contains(&name) {
                            next.remove(&name).unwrap();
                            present.remove(&name);
                        } else {
                            next.add(name.as_str(), 1.0).unwrap();
                            present.insert(name);
                        }
                        let set = names(&next);
                        let before = progress.load(Ordering::Relaxed);
                        let generation = writer.publish(next);
                        published.lock().unwrap().insert(generation, set);
                        // Every 10th publish, a bounded wait for readers to sample an answer after it.
                        let waits = if op % 10 == 0 { 100_000 } else { 0 };
                        for _ in 0..waits {
                            if progress.load(Ordering::Relaxed) > before
                                || readers_left.load(Ordering::Relaxed) == 0
                            {
                                break;
                            }
                            std::thread::yield_now();
                        }
                    }
                    present
                })
            })
            .collect();
        let finals: Vec<BTreeSet<String>> =
            writers.into_iter().map(|w| w.join().unwrap()).collect();
        writers_done.store(true, Ordering::Relaxed);
        let answers: Vec<_> = readers
            .into_iter()
            .flat_map(|r| r.join().unwrap())
            .collect();
        (answers, finals)
    });

    let published = published.into_inner().unwrap();
    assert_eq!(shared.generation(), 2 * WRITER_OPS as u64);
    assert_eq!(published.len(), 2 * WRITER_OPS + 1);
    let mut expected: BTreeSet<String> = ["base-0", "base-1"].map(String::from).into();
    expected.extend(finals.into_iter().flatten());
    assert_eq!(names(&shared.load()), expected, "an update was lost");
    let generations_seen: BTreeSet<u64> = answers.iter().map(|&(g, _)| g).collect();
    assert!(
        generations_seen.len() > 1,
        "readers overlapped no change; the test proved nothing"
    );
    for &(generation, node) in &answers {
        let node = NAMES[node as usize];
        assert!(
            published[&generation].contains(node),
            "generation {generation} answered {node}, not one of its nodes"
        );
    }
}

#[test]
fn any_cloneable_placement_can_be_shared() {
    use crate::algo::{Jump, Maglev};
    use crate::HashFunction;

    let nodes = ["a", "b", "c"].map(|n| Node::new(n).unwrap());
    let jump = SharedRing::new(Jump::new(&nodes, HashFunction::Xxh3).unwrap());
    jump.add(Node::new("d").unwrap()).unwrap();
    assert_eq!(jump.load().nodes().len(), 4);
    assert!(jump.load().lookup_counted(b"k").is_some());
    assert_eq!(jump.load_stats().total, 1.0);

    let maglev = SharedRing::new(Maglev::new(&nodes, HashFunction::Xxh3, None).unwrap());
    maglev.remove("b").unwrap();
    assert_eq!(maglev.generation(), 1);
    assert!(maglev.lookup_with(b"k", |n| n.name() != "b").unwrap());
}
