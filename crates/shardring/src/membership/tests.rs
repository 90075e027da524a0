use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::algo::jump::Jump;
use crate::compat::twemproxy::{ketama_ring, TwemproxyServer};
use crate::hash::TwemproxyHash;
use crate::{HashFunction, Ring};

fn ring_of(members: &[Member]) -> Result<Ring, Error> {
    members
        .iter()
        .fold(Ring::builder().vnodes(40), |b, m| {
            b.node(m.name(), f64::from(m.weight()))
        })
        .build()
}

fn jump_of(members: &[Member]) -> Result<Jump, Error> {
    let nodes: Vec<Node> = members
        .iter()
        .map(|m| Node::new(m.name()))
        .collect::<Result<_, _>>()?;
    Jump::new(&nodes, HashFunction::default())
}

fn member(name: &str, weight: u32) -> Member {
    Member::new(name, format!("{name}.local:11211"), weight).unwrap()
}

fn snapshot(revision: u64, members: &[(&str, u32)]) -> MembershipSnapshot {
    MembershipSnapshot::new(
        revision,
        members.iter().map(|&(n, w)| member(n, w)).collect(),
    )
    .unwrap()
}

#[test]
fn members_refuse_empty_names_addresses_and_zero_weights() {
    for (name, addr, weight) in [("", "a:1", 1), ("a", "", 1), ("a", "a:1", 0)] {
        assert!(matches!(
            Member::new(name, addr, weight),
            Err(MembershipError::InvalidMember { .. })
        ));
    }
}

#[test]
fn snapshots_sort_members_and_refuse_duplicates() {
    let a = snapshot(1, &[("b", 1), ("a", 2)]);
    let b = snapshot(5, &[("a", 2), ("b", 1)]);
    assert!(a.same_members(&b));
    assert_eq!(a.members()[0].name(), "a");
    assert_eq!(a.get("b").map(Member::weight), Some(1));
    assert!(a.get("c").is_none());
    assert_eq!(
        MembershipSnapshot::new(1, vec![member("a", 1), member("a", 2)]),
        Err(MembershipError::DuplicateMember { name: "a".into() })
    );
}

#[test]
fn an_equal_snapshot_builds_nothing() {
    let shared = Arc::new(SharedRing::new(Ring::default()));
    let mut builds = 0;
    let mut follower = Follower::new(Arc::clone(&shared), |m: &[Member]| {
        builds += 1;
        ring_of(m)
    });
    assert_eq!(
        follower.apply(snapshot(3, &[("a", 1), ("b", 1)])),
        Ok(Applied::Published {
            revision: 3,
            generation: 1
        })
    );
    assert_eq!(
        follower.apply(snapshot(4, &[("b", 1), ("a", 1)])),
        Ok(Applied::Unchanged { revision: 4 })
    );
    assert_eq!(follower.current().map(|s| s.revision()), Some(4));
    drop(follower);
    assert_eq!(builds, 1);
    assert_eq!(shared.generation(), 1);
}

#[test]
fn an_empty_snapshot_is_refused_unless_allowed() {
    let shared = Arc::new(SharedRing::new(Ring::default()));
    let mut follower = Follower::new(Arc::clone(&shared), ring_of);
    follower.apply(snapshot(1, &[("a", 1)])).unwrap();
    assert_eq!(
        follower.apply(snapshot(2, &[])),
        Err(MembershipError::Empty { revision: 2 })
    );
    assert_eq!(shared.load().len(), 1);
    let mut follower = follower.allow_empty(true);
    assert!(matches!(
        follower.apply(snapshot(3, &[])),
        Ok(Applied::Published { .. })
    ));
    assert_eq!(shared.load().len(), 0);
    assert!(shared.load().lookup("k").is_none());
}

#[test]
fn an_older_snapshot_is_refused_and_a_failed_build_keeps_the_ring() {
    let shared = Arc::new(SharedRing::new(Ring::default()));
    let mut follower = Follower::new(Arc::clone(&shared), |m: &[Member]| {
        if m.iter().any(|m| m.name() == "poison") {
            Err(Error::Unsupported {
                algorithm: "test",
                what: "poison",
            })
        } else {
            ring_of(m)
        }
    });
    follower.apply(snapshot(10, &[("a", 1)])).unwrap();
    assert_eq!(
        follower.apply(snapshot(9, &[("b", 1)])),
        Err(MembershipError::Stale {
            revision: 9,
            current: 10
        })
    );
    let err = follower
        .apply(snapshot(11, &[("a", 1), ("poison", 1)]))
        .unwrap_err();
    assert!(matches!(err, MembershipError::Build { revision: 11, .. }));
    assert!(std::error::Error::source(&err).is_some());
    assert_eq!(shared.generation(), 1);
    assert_eq!(follower.current().map(|s| s.revision()), Some(10));
}

#[test]
fn an_assumed_snapshot_builds_nothing_when_repeated() {
    let first = snapshot(0, &[("a", 1)]);
    let shared = Arc::new(SharedRing::new(ring_of(first.members()).unwrap()));
    let mut follower = Follower::new(Arc::clone(&shared), ring_of).assume_current(first);
    assert_eq!(
        follower.apply(snapshot(7, &[("a", 1)])),
        Ok(Applied::Unchanged { revision: 7 })
    );
    assert_eq!(shared.generation(), 0);
}

#[test]
fn follow_applies_a_stream_in_order() {
    let shared = Arc::new(SharedRing::new(Ring::default()));
    let mut follower = Follower::new(Arc::clone(&shared), ring_of);
    let (tx, rx) = std::sync::mpsc::channel();
    let source = std::thread::spawn(move || {
        for r in 1..=5u64 {
            let names: Vec<(&str, u32)> = ["a", "b", "c", "d", "e"][..r as usize]
                .iter()
                .map(|&n| (n, 1))
                .collect();
            tx.send(snapshot(r, &names)).unwrap();
        }
        tx.send(snapshot(6, &[])).unwrap();
    });
    let mut outcomes = Vec::new();
    follower.follow(rx, |o| outcomes.push(o.clone()));
    source.join().unwrap();
    assert_eq!(outcomes.len(), 6);
    assert!(matches!(
        outcomes[5],
        Err(MembershipError::Empty { revision: 6 })
    ));
    assert_eq!(shared.load().len(), 5);
    assert_eq!(shared.generation(), 5);
}

#[test]
fn readers_never_see_a_half_applied_snapshot() {
    // Each snapshot replaces every member at once; a reader must always see one whole set.
    let sets: Vec<Vec<String>> = (0..20)
        .map(|i| (0..8).map(|j| format!("s{i}-{j}")).collect())
        .collect();
    let allowed: BTreeSet<Vec<String>> = sets.iter().cloned().collect();
    let shared = Arc::new(SharedRing::new(
        ring_of(&sets[0].iter().map(|n| member(n, 1)).collect::<Vec<_>>()).unwrap(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    // Readers that have made their first read: the snapshots are applied only once every reader
    // reads, so that a busy machine starting the threads late cannot make the test vacuous.
    let reading = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (shared, stop, allowed) = (Arc::clone(&shared), Arc::clone(&stop), allowed.clone());
            let reading = Arc::clone(&reading);
            std::thread::spawn(move || {
                let mut seen = 0u64;
                while seen == 0 || !stop.load(Ordering::Relaxed) {
                    let snap = shared.load();
                    let mut names: Vec<String> =
                        snap.nodes().iter().map(|n| n.name().to_string()).collect();
                    names.sort();
                    assert!(allowed.contains(&names), "half-applied: {names:?}");
                    let owner = snap.lookup("key").unwrap().name().to_string();
                    assert!(names.contains(&owner));
                    if seen == 0 {
                        reading.fetch_add(1, Ordering::Relaxed);
                    }
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    while reading.load(Ordering::Relaxed) < readers.len() {
        std::thread::yield_now();
    }
    let mut follower = Follower::new(Arc::clone(&shared), ring_of);
    for (round, set) in sets.iter().cycle().take(200).enumerate() {
        let members = set.iter().map(|n| member(n, 1)).collect();
        let _ = follower.apply(MembershipSnapshot::new(round as u64 + 1, members).unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

#[test]
fn twemproxy_servers_round_trip_and_unnamed_ones_keep_the_port_quirk() {
    let lines = [
        "10.0.0.1:11211:1",
        "10.0.0.2:11212:3",
        "10.0.0.3:11211:2 cache-c",
        "/tmp/memcached.sock:1",
        "/tmp/other.sock:2 sock-b",
    ];
    let servers: Vec<TwemproxyServer> = lines.iter().map(|l| l.parse().unwrap()).collect();
    let members: Vec<Member> = servers
        .iter()
        .map(|s| Member::from_twemproxy(s).unwrap())
        .collect();
    assert_eq!(members[0].name(), "10.0.0.1:11211");
    assert!(!members[0].is_named());
    assert!(members[2].is_named());
    let back: Vec<TwemproxyServer> = members.iter().map(|m| m.to_twemproxy().unwrap()).collect();
    assert_eq!(back, servers);
    // Port 11211 is left out of an unnamed server's points, as nutcracker does.
    assert_eq!(back[0].identity(), "10.0.0.1");
    let a = ketama_ring(&servers, TwemproxyHash::Fnv1a64, None).unwrap();
    let b = ketama_ring(&back, TwemproxyHash::Fnv1a64, None).unwrap();
    for k in 0..2000 {
        let key = format!("key:{k}");
        assert_eq!(a.lookup(&key), b.lookup(&key));
    }
}

#[test]
fn bad_addresses_are_refused() {
    for addr in ["nohost", "h:0", "h:70000", "h:x", ":11211", "h:+1"] {
        let m = Member::new("m", addr, 1).unwrap();
        assert!(
            matches!(m.to_twemproxy(), Err(MembershipError::InvalidMember { .. })),
            "{addr}"
        );
    }
    let v6 = Member::new("[::1]:11211", "[::1]:11211", 1).unwrap();
    let s = v6.to_twemproxy().unwrap();
    assert_eq!((s.host.as_str(), s.port), ("::1", 11211));
    assert_eq!(Member::from_twemproxy(&s).unwrap(), v6);
}

/// The naive follower: the rules of [`Follower::apply`] written out plainly over a map.
#[derive(Default)]
struct Model {
    current: Option<(u64, BTreeMap<String, u32>)>,
    generation: u64,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Published,
    Unchanged,
    Empty,
    Stale,
}

impl Model {
    fn apply(
        &mut self,
        revision: u64,
        members: &BTreeMap<String, u32>,
        allow_empty: bool,
    ) -> Outcome {
        if let Some((r, m)) = &self.current {
            if revision < *r {
                return Outcome::Stale;
            }
            if m == members {
                self.current = Some((revision, members.clone()));
                return Outcome::Unchanged;
            }
        }
        if members.is_empty() && !allow_empty {
            return Outcome::Empty;
        }
        self.generation += 1;
        self.current = Some((revision, members.clone()));
        Outcome::Published
    }
}

fn outcome(r: &Result<Applied, MembershipError>) -> Outcome {
    match r {
        Ok(Applied::Published { .. }) => Outcome::Published,
        Ok(Applied::Unchanged { .. }) => Outcome::Unchanged,
        Err(MembershipError::Empty { .. }) => Outcome::Empty,
        Err(MembershipError::Stale { .. }) => Outcome::Stale,
        Err(e) => panic!("unexpected {e}"),
    }
}

/// Snapshots over a small universe of names, so that repeats, empties and re-weights are common.
fn snapshots() -> impl Strategy<Value = Vec<(u64, BTreeMap<String, u32>)>> {
    prop::collection::vec(
        (
            0u64..40,
            prop::collection::btree_map(
                prop::sample::select(vec!["a", "b", "c", "d", "e"]).prop_map(String::from),
                1u32..4,
                0..5,
            ),
        ),
        1..30,
    )
}

fn to_snapshot(revision: u64, members: &BTreeMap<String, u32>) -> MembershipSnapshot {
    MembershipSnapshot::new(
        revision,
        members.iter().map(|(n, &w)| member(n, w)).collect(),
    )
    .unwrap()
}

proptest! {
    #[test]
    fn a_ring_follower_matches_the_naive_model(snaps in snapshots(), allow_empty in any::<bool>()) {
        let shared = Arc::new(SharedRing::new(Ring::default()));
        let mut follower = Follower::new(Arc::clone(&shared), ring_of).allow_empty(allow_empty);
        let mut model = Model::default();
        for (revision, members) in &snaps {
            let got = follower.apply(to_snapshot(*revision, members));
            prop_assert_eq!(outcome(&got), model.apply(*revision, members, allow_empty));
            prop_assert_eq!(shared.generation(), model.generation);
            let members = model.current.as_ref().map(|(_, m)| m.clone()).unwrap_or_default();
            // The published ring is the one built from scratch from the model's current members.
            let expected = ring_of(to_snapshot(0, &members).members()).unwrap();
            let ring = shared.load();
            let names: BTreeMap<String, u32> =
                ring.nodes().iter().map(|n| (n.name().to_string(), n.weight() as u32)).collect();
            prop_assert_eq!(&names, &members);
            for k in 0..64 {
                let key = format!("k{k}");
                prop_assert_eq!(ring.lookup(&key), expected.lookup(&key));
            }
        }
    }

    #[test]
    fn any_placement_follows_the_same_way(snaps in snapshots()) {
        let shared = Arc::new(SharedRing::new(jump_of(&[]).unwrap()));
        let mut follower = Follower::new(Arc::clone(&shared), jump_of);
        let mut model = Model::default();
        for (revision, members) in &snaps {
            // Jump has no weights: the model sees every weight as 1.
            let ones: BTreeMap<String, u32> = members.keys().map(|n| (n.clone(), 1)).collect();
            let got = follower.apply(to_snapshot(*revision, &ones));
            prop_assert_eq!(outcome(&got), model.apply(*revision, &ones, false));
            prop_assert_eq!(shared.generation(), model.generation);
            let expected = jump_of(to_snapshot(0, &model.current.as_ref().map(|(_, m)| m.clone()).unwrap_or_default()).members()).unwrap();
            let jump = shared.load();
            for k in 0..64 {
                let key = format!("k{k}");
                prop_assert_eq!(jump.lookup(key.as_bytes()), expected.lookup(key.as_bytes()));
            }
        }
    }
}
