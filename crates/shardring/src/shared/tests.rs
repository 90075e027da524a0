use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Readers on every core while two writers add and remove nodes in a loop. Every answer must be a node of
/// the snapshot generation it came from (as the writer that published it recorded it), and no writer's
/// change may be lost. Bounded by iteration counts, not by time.
#[test]
fn stress_readers_never_see_a_foreign_node_and_no_update_is_lost() {
    const WRITER_OPS: usize = 300;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let shared = SharedRing::new(ring(&["base-0", "base-1"]));
    let published: Mutex<HashMap<u64, BTreeSet<String>>> = Mutex::new(HashMap::new());
    published.lock().unwrap().insert(0, names(&shared.load()));
    let writers_done = AtomicBool::new(false);
    // Lookups done so far; the writers' first changes wait for readers to make progress between them, so
    // the readers provably overlap changes however the scheduler interleaves the threads.
    let reads = AtomicUsize::new(0);
    let start = Barrier::new(cores + 2);

    let (answers, finals) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..cores)
            .map(|r| {
                let (shared, done, start, reads) = (&shared, &writers_done, &start, &reads);
                s.spawn(move || {
                    let mut seen = Vec::new();
                    start.wait();
                    // Readers run until the writers are done (a bounded amount of work), so they overlap
                    // the changes however the scheduler interleaves the threads.
                    for i in 0usize.. {
                        // Relaxed: the flag only ends the loop; nothing is read through it.
                        if done.load(Ordering::Relaxed) && i > 1000 {
                            break;
                        }
                        // Relaxed: a progress count for the writers to wait on; it orders nothing.
                        reads.fetch_add(1, Ordering::Relaxed);
                        let snap = shared.load();
                        let key = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ r as u64;
                        let node = snap.lookup_counted(key.to_le_bytes()).expect("never empty");
                        if i % 7 == 0 {
                            seen.push((snap.generation(), node.name().to_string()));
                        }
                    }
                    seen
                })
            })
            .collect();
        let writers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|prefix| {
                let (shared, published, start, reads) = (&shared, &published, &start, &reads);
                s.spawn(move || {
                    let mut present = BTreeSet::new();
                    start.wait();
                    for op in 0..WRITER_OPS {
                        if op < 20 {
                            let before = reads.load(Ordering::Relaxed);
                            while reads.load(Ordering::Relaxed) < before + 100 {
                                std::thread::yield_now();
                            }
                        }
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
                        let generation = writer.publish(next);
                        published.lock().unwrap().insert(generation, set);
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
    let generations_seen: BTreeSet<u64> = answers.iter().map(|(g, _)| *g).collect();
    assert!(
        generations_seen.len() > 1,
        "readers overlapped no change; the test proved nothing"
    );
    for (generation, node) in &answers {
        assert!(
            published[generation].contains(node),
            "generation {generation} answered {node}, not one of its nodes"
        );
    }
}
