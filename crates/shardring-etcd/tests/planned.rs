//! The next membership, the cut-over and the proxies' registrations against a real etcd (Debian's
//! `etcd-server`), as `shardring migrate` and the proxies use them. Skipped with a loud message when etcd
//! is not installed and `CI` is unset.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardring::membership::{Member, MembershipSnapshot};
use shardring_etcd::layout::MemberSet;
use shardring_etcd::{admin, EtcdError, EtcdSource, Kind, Kinds, Registration, Update};
use test_support::{etcd_available, Etcd};
use tokio_util::sync::CancellationToken;

const POOL: &str = "alpha";

/// How long a wait for an event may take before the test fails: only a backstop against a hang.
const PATIENCE: Duration = Duration::from_secs(30);

fn source(url: &str) -> EtcdSource {
    common::test_source(url, POOL, false)
}

fn planned_source(url: &str) -> EtcdSource {
    common::test_source(url, POOL, true)
}

fn server(i: u32) -> Member {
    Member::new(format!("cache-{i}"), format!("127.0.0.1:{}", 20000 + i), 1).unwrap()
}

fn servers(range: std::ops::Range<u32>) -> Vec<Member> {
    range.map(server).collect()
}

fn names(s: &MembershipSnapshot) -> Vec<String> {
    s.members().iter().map(|m| m.name().to_string()).collect()
}

fn names_of(members: &[Member]) -> Vec<String> {
    members.iter().map(|m| m.name().to_string()).collect()
}

/// Polls `ok` until it holds or `limit` passes; whether it held.
async fn wait_until(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ok()
}

/// One planned update as seen: its revision, current names, next names.
type Seen = (u64, Vec<String>, Option<Vec<String>>);

/// A planned source's watch in a background task, recording every update.
struct Watching {
    seen: Arc<Mutex<Vec<Seen>>>,
    others: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Watching {
    fn start(source: EtcdSource) -> Watching {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let others: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = CancellationToken::new();
        let task = {
            let (seen, others, stop) = (Arc::clone(&seen), Arc::clone(&others), stop.clone());
            tokio::spawn(async move {
                source
                    .watch(
                        |u| match u {
                            Update::Planned { current, next, .. } => {
                                if let Some(n) = &next {
                                    assert_eq!(n.revision(), current.revision());
                                }
                                seen.lock().unwrap().push((
                                    current.revision(),
                                    names(&current),
                                    next.as_ref().map(names),
                                ));
                            }
                            other => others.lock().unwrap().push(format!("{other:?}")),
                        },
                        stop,
                    )
                    .await;
            })
        };
        Watching {
            seen,
            others,
            stop,
            task,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits for an update at `revision` or later; returns it.
    async fn wait_revision(&self, revision: i64) -> Seen {
        let ok = wait_until(PATIENCE, || {
            self.seen().last().is_some_and(|s| s.0 >= revision as u64)
        })
        .await;
        assert!(
            ok,
            "no update at revision {revision}; seen {:?}, others {:?}",
            self.seen(),
            self.others.lock().unwrap()
        );
        self.seen().last().cloned().unwrap()
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_source_hands_out_current_and_next_and_a_cut_over_swaps_both_in_one_update() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url());
    let (old, new) = (servers(0..3), servers(1..5));
    admin::publish(&src, &old).await.unwrap();
    // Another pool whose name starts with this one's: none of its keys may show.
    let other = EtcdSource::builder(&[etcd.url()], format!("{POOL}b")).build();
    admin::publish(&other, &servers(7..9)).await.unwrap();
    admin::publish_next(&other, &servers(8..10)).await.unwrap();

    let w = Watching::start(planned_source(&etcd.url()));
    let first = w.wait_revision(1).await;
    assert_eq!((first.1, first.2), (names_of(&old), None));

    let published = admin::publish_next(&src, &new).await.unwrap();
    let planned = w.wait_revision(published).await;
    assert_eq!(
        (planned.1, planned.2),
        (names_of(&old), Some(names_of(&new)))
    );
    // Publishing the same next again changes nothing (and hands out nothing).
    assert_eq!(admin::publish_next(&src, &new).await.unwrap(), {
        let (current, _) = admin::read_planned(&src).await.unwrap();
        current.revision() as i64
    });

    // A proxy's registration is under the pool's prefix too, and hands out nothing.
    let before = w.seen().len();
    let reg = Registration {
        current: "c0ffee".into(),
        next: Some("beef".into()),
        current_revision: published,
        next_revision: published,
    };
    let handle = admin::register_proxy(&src, "proxy-1", &reg, Duration::from_secs(30))
        .await
        .unwrap();

    // Read once, with the next membership, at one revision.
    let read = planned_source(&etcd.url()).read().await.unwrap();
    assert_eq!(names(&read.snapshot), names_of(&old));
    assert_eq!(read.next.as_ref().map(names), Some(names_of(&new)));
    assert_eq!(
        read.next.as_ref().map(MembershipSnapshot::revision),
        Some(read.snapshot.revision())
    );
    assert!(read.malformed.is_empty(), "{:?}", read.malformed);
    // A source without it reads no next (and its snapshot is as before).
    let plain = src.read().await.unwrap();
    assert!(plain.next.is_none());
    assert_eq!(names(&plain.snapshot), names_of(&old));
    let (current, next) = admin::read_planned(&src).await.unwrap();
    assert_eq!(
        (names(&current), next.map(|n| names(&n))),
        (names_of(&old), Some(names_of(&new)))
    );

    let cut = admin::cut_over(&src, Some(published)).await.unwrap();
    let swapped = w.wait_revision(cut).await;
    assert_eq!(swapped.0, cut as u64);
    assert_eq!(
        (swapped.1, swapped.2),
        (names_of(&new), Some(names_of(&old)))
    );
    // Every update from the watch is one of the three states etcd went through: never one side swapped
    // and the other not.
    let allowed = [
        (names_of(&old), None),
        (names_of(&old), Some(names_of(&new))),
        (names_of(&new), Some(names_of(&old))),
    ];
    let seen = w.seen();
    for s in &seen {
        assert!(
            allowed.contains(&(s.1.clone(), s.2.clone())),
            "{s:?} in {seen:?}"
        );
    }
    assert_eq!(
        seen.len(),
        before + 1,
        "one update for the cut-over: {seen:?}"
    );
    // The servers a plain source (the proxy today) sees are the new ones.
    assert_eq!(names(&src.read().await.unwrap().snapshot), names_of(&new));

    let dropped = admin::drop_next(&src).await.unwrap();
    let done = w.wait_revision(dropped).await;
    assert_eq!((done.1, done.2), (names_of(&new), None));
    // The other pool is untouched.
    let (current, next) = admin::read_planned(&other).await.unwrap();
    assert_eq!(names(&current), names_of(&servers(7..9)));
    assert_eq!(next.map(|n| names(&n)), Some(names_of(&servers(8..10))));
    handle.revoke().await.unwrap();
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_over_fails_cleanly_when_the_pool_changed_after_its_read() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url());
    admin::publish(&src, &servers(0..3)).await.unwrap();
    let err = admin::cut_over(&src, None).await.unwrap_err();
    assert!(matches!(err, EtcdError::NoNext { .. }), "{err}");
    let err = admin::publish_next(&src, &[]).await.unwrap_err();
    assert!(matches!(err, EtcdError::Refused(_)), "{err}");

    let read_at = admin::publish_next(&src, &servers(1..4)).await.unwrap();
    let mut read_at = read_at;
    for what in [
        "an added server",
        "a re-weighted server",
        "a removed server",
        "a changed next membership",
    ] {
        match what {
            "an added server" => {
                admin::put_member(&src, &server(9), None).await.unwrap();
            }
            "a re-weighted server" => {
                let heavier = Member::new("cache-0", server(0).addr(), 3).unwrap();
                admin::put_member(&src, &heavier, None).await.unwrap();
            }
            "a removed server" => {
                admin::remove_member(&src, "cache-1").await.unwrap();
            }
            _ => {
                admin::publish_next(&src, &[server(1), server(3)])
                    .await
                    .unwrap();
            }
        }
        let err = admin::cut_over(&src, Some(read_at)).await.unwrap_err();
        assert!(
            matches!(err, EtcdError::Changed { read_revision, .. } if read_revision == read_at),
            "{what}: {err}"
        );
        // Nothing was written: the servers are what the change made them.
        let (current, next) = admin::read_planned(&src).await.unwrap();
        assert!(next.is_some(), "{what}");
        read_at = current.revision() as i64;
    }
    // A registration changing meanwhile does not count.
    let reg = Registration {
        current: "1".into(),
        next: None,
        current_revision: read_at,
        next_revision: 0,
    };
    let handle = admin::register_proxy(&src, "p", &reg, Duration::from_secs(30))
        .await
        .unwrap();
    let (current, next) = admin::read_planned(&src).await.unwrap();
    let cut = admin::cut_over(&src, Some(read_at)).await.unwrap();
    let (after, after_next) = admin::read_planned(&src).await.unwrap();
    assert_eq!(after.revision() as i64, cut);
    assert_eq!(names(&after), names(&next.unwrap()));
    assert_eq!(names(&after_next.unwrap()), names(&current));
    // A cut-over back (the change called off) works the same way, then drop_next ends it.
    admin::cut_over(&src, None).await.unwrap();
    let (back, _) = admin::read_planned(&src).await.unwrap();
    assert_eq!(names(&back), names(&current));
    assert_eq!(
        back.get("cache-0").map(Member::weight),
        Some(3),
        "weights survive two swaps"
    );
    admin::drop_next(&src).await.unwrap();
    assert!(admin::read_planned(&src).await.unwrap().1.is_none());
    handle.revoke().await.unwrap();
}

fn registration(current: &str, next: Option<&str>, revision: i64) -> Registration {
    Registration {
        current: current.into(),
        next: next.map(str::to_owned),
        current_revision: revision,
        next_revision: if next.is_some() { revision } else { 0 },
    }
}

async fn proxies(src: &EtcdSource) -> Vec<(String, Registration)> {
    admin::list_proxies(src).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_proxy_is_listed_updated_and_gone_when_dropped_or_left_to_expire() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url());
    let a = registration("aa", None, 5);
    let handle = admin::register_proxy(&src, "proxy-a", &a, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(proxies(&src).await, [("proxy-a".to_string(), a)]);
    let b = registration("aa", Some("bb"), 7);
    handle.update(&b).await.unwrap();
    assert_eq!(proxies(&src).await, [("proxy-a".to_string(), b.clone())]);
    assert!(handle.update(&registration("a a", None, 1)).await.is_err());
    assert!(
        admin::register_proxy(&src, "x/y", &b, Duration::from_secs(5))
            .await
            .is_err()
    );

    // Dropped: the lease is revoked, so the key goes well before its 30 s.
    let dropped = Instant::now();
    drop(handle);
    let mut gone = false;
    while dropped.elapsed() < Duration::from_secs(10) {
        if proxies(&src).await.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        gone,
        "still registered {:?} after the drop",
        dropped.elapsed()
    );

    // Abandoned (a process that stops): the key stays until the 2 s lease expires.
    let handle = admin::register_proxy(&src, "proxy-b", &b, Duration::from_secs(2))
        .await
        .unwrap();
    // Kept alive past its time to live first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(proxies(&src).await.len(), 1, "kept alive past 2 s");
    let abandoned = Instant::now();
    handle.abandon();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(proxies(&src).await.len(), 1, "not revoked when abandoned");
    let mut gone = false;
    while abandoned.elapsed() < Duration::from_secs(60) {
        if proxies(&src).await.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = abandoned.elapsed();
    assert!(
        gone,
        "the abandoned registration did not expire within 60 s"
    );
    assert!(after >= Duration::from_millis(1000), "gone after {after:?}");
    eprintln!("an abandoned 2 s registration expired after {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_survives_an_etcd_restart_and_a_lost_lease() {
    if !etcd_available() {
        return;
    }
    let mut etcd = Etcd::start();
    let src = source(&etcd.url());
    let a = registration("aa", Some("bb"), 3);
    let handle = admin::register_proxy(&src, "proxy-a", &a, Duration::from_secs(2))
        .await
        .unwrap();

    // etcd away for longer than the lease's time to live.
    etcd.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The update fails while etcd is away, but its value is kept.
    let b = registration("cc", None, 9);
    assert!(handle.update(&b).await.is_err());
    etcd.restart();
    // The keep-alive comes back; after twice the time to live the key is still there.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let listed = proxies(&src).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].1 == a || listed[0].1 == b, "{listed:?}");
    handle.update(&b).await.unwrap();
    assert_eq!(proxies(&src).await, [("proxy-a".to_string(), b.clone())]);

    // The lease lost (revoked from outside, as an expiry would): registered again under a new lease,
    // with the last value.
    let old = handle.lease();
    let mut client = admin::client(&src).await.unwrap();
    client.lease_revoke(old).await.unwrap();
    let back = wait_until(PATIENCE, || handle.lease() != old).await;
    assert!(back, "no new lease after the old one was revoked");
    let ok = {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let listed = proxies(&src).await;
            if listed == [("proxy-a".to_string(), b.clone())] || Instant::now() > deadline {
                break listed;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(ok, [("proxy-a".to_string(), b)]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(proxies(&src).await.len(), 1, "the new lease is kept alive");
    handle.revoke().await.unwrap();
    assert!(proxies(&src).await.is_empty());
}

/// etcd keeps running while the proxy cannot reach it, for longer than the lease: the lease expires
/// there, and once the path is back the keep-alive finds it gone ("lease not found") and registers
/// again, with the last value, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_comes_back_after_a_partition_longer_than_its_lease() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let relay =
        test_support::Relay::start(etcd.url().trim_start_matches("http://").to_owned()).await;
    let direct = source(&etcd.url());
    let via_relay = source(&relay.url());
    let a = registration("aa", Some("bb"), 3);
    let handle = admin::register_proxy(&via_relay, "proxy-a", &a, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(proxies(&direct).await, [("proxy-a".to_string(), a.clone())]);
    let old = handle.lease();
    relay.cut();
    // The lease expires in etcd, which is up all along.
    let deadline = Instant::now() + PATIENCE;
    while !proxies(&direct).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the cut-off registration expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.restore();
    let started = Instant::now();
    let deadline = started + PATIENCE;
    let listed = loop {
        let listed = proxies(&direct).await;
        if !listed.is_empty() || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(listed, [("proxy-a".to_string(), a)], "registered again");
    assert_ne!(handle.lease(), old, "under a new lease");
    eprintln!(
        "registered again {:?} after the path came back",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        proxies(&direct).await.len(),
        1,
        "the new lease is kept alive"
    );
    handle.revoke().await.unwrap();
}

/// The roster keeps a participant whose lease lapsed (silence is not agreement), loses one that
/// stopped cleanly, and gives one up only when asked and only once its lease is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roster_outlives_a_lapsed_lease_but_not_a_clean_stop() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url());
    let a = registration("aa", None, 3);
    let ttl = Duration::from_secs(1);
    let clean = admin::register_proxy(&src, "clean", &a, ttl).await.unwrap();
    let dies = admin::register_proxy(&src, "dies", &a, ttl).await.unwrap();
    let ids = |l: Vec<(String, Registration)>| l.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
    assert_eq!(
        ids(admin::list_roster(&src).await.unwrap()),
        ["clean", "dies"]
    );
    let refused = admin::forget_participant(&src, "dies").await.unwrap_err();
    assert!(refused.to_string().contains("registered now"), "{refused}");
    clean.revoke().await.unwrap();
    dies.abandon();
    let deadline = Instant::now() + PATIENCE;
    while !proxies(&src).await.is_empty() {
        assert!(Instant::now() < deadline, "the abandoned lease expires");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let roster = admin::list_roster(&src).await.unwrap();
    assert_eq!(roster, [("dies".to_string(), a.clone())]);
    let gone = admin::forget_participant(&src, "dies").await.unwrap();
    assert_eq!(gone.last, a);
    assert!(admin::list_roster(&src).await.unwrap().is_empty());
    assert!(admin::forget_participant(&src, "dies").await.is_err());
}

/// A change's end that records a deletion still to do: `next/` and the cut-over mark go, the
/// record stays (the proxies' watch sees no member under it) until cleared, or until the next
/// change's cut-over gives it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_next_can_record_a_pending_deletion_that_outlives_it() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url());
    admin::publish(&src, &servers(0..3)).await.unwrap();
    admin::publish_next(&src, &servers(0..2)).await.unwrap();
    admin::cut_over(&src, None).await.unwrap();
    assert!(admin::cut_over_pending(&src).await.unwrap().is_some());
    assert_eq!(admin::pending_deletion(&src).await.unwrap(), None);
    admin::drop_next_pending_deletion(&src, "the record\n")
        .await
        .unwrap();
    let (current, next) = admin::read_planned(&src).await.unwrap();
    assert_eq!(names(&current), names_of(&servers(0..2)));
    assert!(next.is_none());
    assert_eq!(admin::cut_over_pending(&src).await.unwrap(), None);
    assert_eq!(
        admin::pending_deletion(&src).await.unwrap().as_deref(),
        Some("the record\n")
    );
    admin::clear_pending_deletion(&src).await.unwrap();
    assert_eq!(admin::pending_deletion(&src).await.unwrap(), None);
    // A new change's cut-over gives up a deletion still pending, in its own transaction.
    admin::publish_next(&src, &servers(0..3)).await.unwrap();
    admin::cut_over(&src, None).await.unwrap();
    admin::drop_next_pending_deletion(&src, "another record\n")
        .await
        .unwrap();
    admin::publish_next(&src, &servers(0..4)).await.unwrap();
    assert!(admin::pending_deletion(&src).await.unwrap().is_some());
    admin::cut_over(&src, None).await.unwrap();
    assert_eq!(admin::pending_deletion(&src).await.unwrap(), None);
}

/// The kinds (`kind`, `next-kind`) are written with their sets, swapped by the cut-over in its
/// own transaction, dropped with `next/`, and read at the sets' revision; a kind changed after a
/// cut-over's read makes it fail; a value no version reads is reported and read as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_travel_with_their_member_sets() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = planned_source(&etcd.url());
    let ring_to_cluster = Kinds {
        current: Kind::Ring,
        next: Kind::RedisCluster,
    };
    admin::publish(&src, &servers(0..4)).await.unwrap();
    let read_at = admin::publish_next_kind(&src, &servers(7..8), Kind::RedisCluster)
        .await
        .unwrap();
    let read = src.read().await.unwrap();
    assert_eq!(read.kinds, ring_to_cluster);
    assert_eq!(
        read.next.as_ref().map(names),
        Some(names_of(&servers(7..8)))
    );
    // Published again as the same kind: nothing to write.
    assert_eq!(
        admin::publish_next_kind(&src, &servers(7..8), Kind::RedisCluster)
            .await
            .unwrap(),
        read_at
    );
    let client_source = source(&etcd.url());
    assert_eq!(
        client_source.read().await.unwrap().kinds,
        Kinds::default(),
        "a source of servers/ alone reads no kind"
    );

    // A kind changed after the cut-over's read makes it fail, nothing written.
    admin::publish_next(&src, &servers(7..8)).await.unwrap();
    let err = admin::cut_over(&src, Some(read_at)).await.unwrap_err();
    assert!(matches!(err, EtcdError::Changed { .. }), "{err}");
    assert_eq!(src.read().await.unwrap().kinds, Kinds::default());
    admin::publish_next_kind(&src, &servers(7..8), Kind::RedisCluster)
        .await
        .unwrap();

    admin::cut_over(&src, None).await.unwrap();
    let cut = src.read().await.unwrap();
    assert_eq!(
        cut.kinds,
        Kinds {
            current: Kind::RedisCluster,
            next: Kind::Ring,
        }
    );
    assert_eq!(names(&cut.snapshot), names_of(&servers(7..8)));
    admin::drop_next(&src).await.unwrap();
    let done = src.read().await.unwrap();
    assert_eq!(
        (done.kinds.current, done.kinds.next, done.next.is_none()),
        (Kind::RedisCluster, Kind::Ring, true)
    );
    // A ring published over it takes the kind away.
    let published = admin::publish(&src, &servers(7..8)).await.unwrap();
    assert_eq!(published.written, 1, "the kind key, deleted");
    assert_eq!(src.read().await.unwrap().kinds, Kinds::default());

    // A value no version reads: reported, and read as unknown.
    let mut client = src.connect().await.unwrap();
    client
        .put(src.keys().kind_key(MemberSet::Current), "hash-slots", None)
        .await
        .unwrap();
    let odd = src.read().await.unwrap();
    assert_eq!(odd.kinds.current, Kind::Unknown);
    assert_eq!(odd.malformed.len(), 1, "{:?}", odd.malformed);
    let err = admin::publish_kind(&src, &servers(7..8), Kind::Unknown)
        .await
        .unwrap_err();
    assert!(matches!(err, EtcdError::Refused(_)), "{err}");
}
