//! The etcd source against a real etcd (Debian's `etcd-server`) started on free 127.0.0.1 ports with a
//! temporary data dir. Skipped with a loud message when etcd is not installed and `CI` is unset.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::CompactionOptions;
use shardring::hash::TwemproxyHash;
use shardring::membership::{Follower, Member, MembershipError, MembershipSnapshot};
use shardring::shared::SharedRing;
use shardring::Ring;
use shardring_etcd::{admin, follow, twemproxy_ketama, EtcdSource, FollowStats, Update};
use test_support::{etcd_available, Etcd, Relay};
use tokio_util::sync::CancellationToken;

const POOL: &str = "alpha";

fn source(url: &str, debounce: Duration) -> EtcdSource {
    EtcdSource::builder(&[url], POOL)
        .debounce(debounce)
        .retry_min(Duration::from_millis(50))
        .retry_max(Duration::from_millis(400))
        .request_timeout(Duration::from_secs(1))
        .build()
}

fn build(members: &[Member]) -> Result<Ring, shardring::Error> {
    twemproxy_ketama(members, TwemproxyHash::Fnv1a64, None)
}

/// A ring following etcd in a background task.
struct Following {
    shared: Arc<SharedRing<Ring>>,
    stats: Arc<FollowStats>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Following {
    fn start(source: EtcdSource, allow_empty: bool) -> Following {
        let shared = Arc::new(SharedRing::new(Ring::default()));
        let stats = Arc::new(FollowStats::default());
        let stop = CancellationToken::new();
        let task = {
            let (shared, stats, stop) = (Arc::clone(&shared), Arc::clone(&stats), stop.clone());
            tokio::spawn(async move {
                let mut follower = Follower::new(shared, build).allow_empty(allow_empty);
                follow(&source, &mut follower, &stats, stop).await;
            })
        };
        Following {
            shared,
            stats,
            stop,
            task,
        }
    }

    fn members(&self) -> Vec<(String, u32)> {
        members_of(&self.shared.load())
    }

    /// What the follower has: its servers, the revision of its last snapshot, its errors.
    fn describe(&self) -> String {
        format!(
            "{:?} at revision {} ({} errors)",
            self.members(),
            self.stats.revision.load(Ordering::Relaxed),
            self.stats.errors.load(Ordering::Relaxed)
        )
    }

    /// Waits until the follower's ring has `n` servers.
    async fn wait_len(&self, n: usize) {
        wait_for(
            || {
                format!(
                    "a ring of {n} servers; the follower has {}",
                    self.describe()
                )
            },
            || self.members().len() == n,
        )
        .await;
    }

    /// Waits until the follower has applied etcd's state at `revision` (or a later one).
    async fn wait_revision(&self, revision: i64) {
        wait_for(
            || format!("revision {revision}; the follower has {}", self.describe()),
            || self.stats.revision.load(Ordering::Relaxed) >= revision as u64,
        )
        .await;
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

fn members_of(ring: &Ring) -> Vec<(String, u32)> {
    let mut m: Vec<(String, u32)> = ring
        .nodes()
        .iter()
        .map(|n| (n.name().to_string(), n.weight() as u32))
        .collect();
    m.sort();
    m
}

fn expected(snapshot: &MembershipSnapshot) -> Vec<(String, u32)> {
    snapshot
        .members()
        .iter()
        .map(|m| (m.name().to_string(), m.weight()))
        .collect()
}

/// How long a wait for an event may take before the test fails: only a backstop against a hang (each
/// wait ends as soon as its event happens), so generous enough for a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `ok` until it holds or `limit` passes; whether it held.
async fn wait_until(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    ok()
}

/// Waits for `ok` (at most [`PATIENCE`]); fails saying what it waited for and what it saw instead.
async fn wait_for(what: impl Fn() -> String, ok: impl FnMut() -> bool) {
    let started = Instant::now();
    if !wait_until(PATIENCE, ok).await {
        panic!("waited {:?} for {}", started.elapsed(), what());
    }
}

fn server(i: u32, weight: u32) -> Member {
    Member::new(
        format!("cache-{i}"),
        format!("127.0.0.1:{}", 20000 + i),
        weight,
    )
    .unwrap()
}

async fn seed(src: &EtcdSource, n: u32) -> MembershipSnapshot {
    let members: Vec<Member> = (0..n).map(|i| server(i, 1)).collect();
    admin::publish(src, &members).await.unwrap();
    src.read().await.unwrap().snapshot
}

/// Writes `member` again as it is: a new revision that changes no server. Once a follower has applied
/// it, it has applied everything written before; the event to wait on where a test would otherwise sleep
/// to see that nothing more happens.
async fn marker(src: &EtcdSource, member: &Member) -> i64 {
    admin::put_member(src, member, None).await.unwrap()
}

/// xorshift: the writers' choices, reproducible without a dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_of_concurrent_writers_end_on_etcds_final_state_together() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let debounce = Duration::from_millis(100);
    let src = source(&etcd.url(), debounce);
    seed(&src, 6).await;
    let a = Following::start(source(&etcd.url(), debounce), false);
    let b = Following::start(source(&etcd.url(), debounce), false);
    a.wait_len(6).await;
    b.wait_len(6).await;

    // Three writers, 40 random adds / removes / re-weights each, all at once.
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let src = src.clone();
            tokio::spawn(async move {
                let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (w + 1);
                for _ in 0..40 {
                    let i = (next(&mut rng) % 12) as u32;
                    if next(&mut rng).is_multiple_of(3) {
                        let _ = admin::remove_member(&src, &format!("cache-{i}")).await;
                    } else {
                        let weight = (next(&mut rng) % 3) as u32 + 1;
                        admin::put_member(&src, &server(i, weight), None)
                            .await
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let fin = src.read().await.unwrap().snapshot;
    if fin.is_empty() {
        // The follower refuses an empty pool; both keep their last ring then. (Not with this seed.)
        return;
    }
    // Both followers reach etcd's final revision (each within a debounce of the last write: the
    // source's unit tests hold that bound on a paused clock) with etcd's final servers.
    let want = expected(&fin);
    let revision = fin.revision() as i64;
    a.wait_revision(revision).await;
    b.wait_revision(revision).await;
    assert_eq!(a.members(), want, "follower a; etcd at revision {revision}");
    assert_eq!(b.members(), want, "follower b; etcd at revision {revision}");
    // And their rings are the ring built from etcd's final state, key for key.
    let reference = build(fin.members()).unwrap();
    for k in 0..2000 {
        let key = format!("user:{k}");
        assert_eq!(a.shared.load().lookup(&key), reference.lookup(&key));
        assert_eq!(b.shared.load().lookup(&key), reference.lookup(&key));
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transaction_is_one_snapshot_and_one_ring() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url(), Duration::ZERO);
    seed(&src, 2).await;
    let f = Following::start(source(&etcd.url(), Duration::ZERO), false);
    f.wait_len(2).await;
    let generation = f.shared.generation();
    // Five servers published at once: one revision, so one new ring, not five.
    let members: Vec<Member> = (0..7).map(|i| server(i, 2)).collect();
    admin::publish(&src, &members).await.unwrap();
    f.wait_len(7).await;
    f.wait_revision(marker(&src, &members[0]).await).await;
    assert_eq!(f.shared.generation(), generation + 1);
    // Publishing the same set again writes nothing.
    assert_eq!(admin::publish(&src, &members).await.unwrap().written, 0);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_within_the_debounce_is_one_ring_change() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url(), Duration::ZERO);
    seed(&src, 2).await;
    let debounce = Duration::from_millis(400);
    let f = Following::start(source(&etcd.url(), debounce), false);
    f.wait_len(2).await;
    let generation = f.shared.generation();
    let started = Instant::now();
    for i in 2..12 {
        admin::put_member(&src, &server(i, 1), None).await.unwrap();
    }
    let burst = started.elapsed();
    f.wait_len(12).await;
    f.wait_revision(marker(&src, &server(2, 1)).await).await;
    if burst < debounce / 2 {
        // Ten writes, ten revisions, one ring.
        assert_eq!(f.shared.generation(), generation + 1);
    }
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_mid_run_keeps_the_ring_then_catches_up_after_a_restart() {
    if !etcd_available() {
        return;
    }
    let mut etcd = Etcd::start();
    let src = source(&etcd.url(), Duration::from_millis(20));
    seed(&src, 4).await;
    let f = Following::start(source(&etcd.url(), Duration::from_millis(20)), false);
    f.wait_len(4).await;
    let before = f.shared.generation();
    let owner = f.shared.load().lookup("k").map(|n| n.name().to_string());

    etcd.kill();
    wait_for(
        || format!("the loss to be counted; the follower has {}", f.describe()),
        || f.stats.errors.load(Ordering::Relaxed) > 0,
    )
    .await;
    // The ring keeps serving while etcd is away.
    assert_eq!(f.shared.generation(), before);
    assert_eq!(
        f.shared.load().lookup("k").map(|n| n.name().to_string()),
        owner
    );

    etcd.restart();
    let revision = admin::put_member(&src, &server(9, 1), None).await.unwrap();
    f.wait_revision(revision).await;
    assert_eq!(f.members().len(), 5, "caught up: {}", f.describe());
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_past_the_watched_revision_resyncs_with_a_fresh_range() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let direct = source(&etcd.url(), Duration::ZERO);
    seed(&direct, 3).await;
    let relay = Relay::start(format!("127.0.0.1:{}", etcd.client_port)).await;
    let via_relay = source(&relay.url(), Duration::ZERO);

    let shared = Arc::new(SharedRing::new(Ring::default()));
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = CancellationToken::new();
    let task = {
        let (shared, log, stop) = (Arc::clone(&shared), Arc::clone(&log), stop.clone());
        tokio::spawn(async move {
            let mut follower = Follower::new(shared, build);
            via_relay
                .watch(
                    |u| {
                        let line = match u {
                            Update::Snapshot(s) => {
                                let _ = follower.apply(s);
                                "snapshot".to_string()
                            }
                            Update::Resync { compacted } => format!("resync {compacted}"),
                            Update::Lost { .. } => "lost".to_string(),
                            other => format!("{other:?}"),
                        };
                        log.lock().unwrap().push(line);
                    },
                    stop,
                )
                .await;
        })
    };
    wait_for(
        || format!("a ring of 3 servers; log {:?}", log.lock().unwrap()),
        || shared.load().len() == 3,
    )
    .await;

    // The follower loses etcd; meanwhile the pool changes and etcd compacts past what it has seen.
    relay.cut();
    for i in 3..6 {
        admin::put_member(&direct, &server(i, 1), None)
            .await
            .unwrap();
    }
    admin::remove_member(&direct, "cache-0").await.unwrap();
    let latest = admin::put_member(&direct, &server(7, 3), None)
        .await
        .unwrap();
    let mut client = admin::client(&direct).await.unwrap();
    client
        .compact(latest, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    relay.restore();

    let want = expected(&direct.read().await.unwrap().snapshot);
    wait_for(
        || {
            format!(
                "etcd's servers {want:?} after the resync; the follower has {:?}, log {:?}",
                members_of(&shared.load()),
                log.lock().unwrap()
            )
        },
        || members_of(&shared.load()) == want,
    )
    .await;
    assert!(
        log.lock().unwrap().iter().any(|l| l.starts_with("resync")),
        "{:?}",
        log.lock().unwrap()
    );
    stop.cancel();
    let _ = task.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_registered_under_an_expiring_lease_leaves_the_ring() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url(), Duration::ZERO);
    seed(&src, 2).await;
    let f = Following::start(source(&etcd.url(), Duration::ZERO), false);
    f.wait_len(2).await;
    let mut client = admin::client(&src).await.unwrap();
    // etcd's own account of the key, on a connection of its own: the delete the lease expiry makes.
    let key = src.keys().server_key("cache-5");
    let mut deletes = client.watch(key.as_str(), None).await.unwrap();
    let granted = Instant::now();
    let lease = client.lease_grant(2, None).await.unwrap();
    let put = admin::put_member(&src, &server(5, 1), Some(lease.id()))
        .await
        .unwrap();
    f.wait_len(3).await;
    let seen = granted.elapsed();
    // Nobody keeps the lease alive: etcd deletes the key when it expires. The wait is etcd's (its
    // lessor and a raft round on a busy machine), bounded generously.
    let deleted = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let response = match deletes.message().await {
                Ok(Some(r)) => r,
                // etcd itself went away: no follower could have seen a delete.
                other => panic!("etcd's own watch on {key} ended: {other:?}"),
            };
            if let Some(kv) = response
                .events()
                .iter()
                .find(|e| matches!(e.event_type(), etcd_client::EventType::Delete))
                .and_then(|e| e.kv())
            {
                return kv.mod_revision();
            }
        }
    })
    .await;
    let etcd_deleted = granted.elapsed();
    let Ok(deleted) = deleted else {
        let ttl = client
            .lease_time_to_live(lease.id(), None)
            .await
            .map(|t| t.ttl());
        panic!(
            "etcd did not expire the {} s lease within 60 s (put at revision {put}, its time to live now {ttl:?})",
            lease.ttl()
        );
    };
    // The follower has the delete once its ring is at the delete's revision; from here it is the
    // follower's wait, not etcd's.
    let reached = wait_until(PATIENCE, || {
        f.stats.revision.load(Ordering::Relaxed) >= deleted as u64
    })
    .await;
    let timeline = format!(
        "lease of {} s granted; put at revision {put}; follower had it after {seen:?}; etcd deleted it at \
         revision {deleted} after {etcd_deleted:?}; the follower has {} after {:?}",
        lease.ttl(),
        f.describe(),
        granted.elapsed()
    );
    eprintln!("{timeline}");
    assert!(reached, "the follower missed the delete: {timeline}");
    assert!(etcd_deleted >= Duration::from_millis(500), "{timeline}");
    assert!(
        !f.members().iter().any(|(n, _)| n == "cache-5"),
        "{timeline}"
    );
    assert_eq!(f.members().len(), 2, "{timeline}");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_values_are_skipped_and_counted_and_an_empty_pool_is_refused() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url(), Duration::ZERO);
    seed(&src, 3).await;
    let f = Following::start(source(&etcd.url(), Duration::ZERO), false);
    let lenient = Following::start(source(&etcd.url(), Duration::ZERO), true);
    f.wait_len(3).await;

    let mut client = admin::client(&src).await.unwrap();
    let key = src.keys().server_key("cache-1");
    client
        .put(key.as_str(), "not an address", None)
        .await
        .unwrap();
    f.wait_len(2).await;
    assert_eq!(f.stats.malformed.load(Ordering::Relaxed), 1);
    assert!(!f.members().iter().any(|(n, _)| n == "cache-1"));
    // A malformed key read by the initial range is skipped too.
    let late = Following::start(source(&etcd.url(), Duration::ZERO), false);
    late.wait_len(2).await;
    assert_eq!(late.stats.malformed.load(Ordering::Relaxed), 1);

    // One bad delete of the whole pool: the strict follower keeps its ring, the lenient one empties.
    let errors = f.stats.errors.load(Ordering::Relaxed);
    client
        .delete(
            src.keys().servers_prefix(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    wait_for(
        || {
            format!(
                "an empty ring; the lenient follower has {}",
                lenient.describe()
            )
        },
        || lenient.members().is_empty(),
    )
    .await;
    wait_for(
        || {
            format!(
                "the empty pool refused; the strict follower has {}",
                f.describe()
            )
        },
        || f.stats.errors.load(Ordering::Relaxed) > errors,
    )
    .await;
    assert_eq!(f.members().len(), 2, "{}", f.describe());
    f.stop().await;
    lenient.stop().await;
    late.stop().await;
}

#[tokio::test]
async fn an_unreachable_etcd_at_start_is_a_clear_error() {
    // No etcd needed: nothing listens on this port.
    let port = test_support::free_port();
    let src = source(&format!("http://127.0.0.1:{port}"), Duration::ZERO);
    let started = Instant::now();
    let err = src.read().await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    // The library refuses what the follower would refuse, whatever the source.
    let shared = Arc::new(SharedRing::new(Ring::default()));
    let mut follower = Follower::new(shared, build);
    assert_eq!(
        follower.apply(MembershipSnapshot::new(1, Vec::new()).unwrap()),
        Err(MembershipError::Empty { revision: 1 })
    );
}

/// A ring that follows a planned source refuses servers etcd says are a Redis Cluster's seeds
/// (the `kind` key): its ring stays, the refusal counted; a ring published again is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_following_the_pool_refuses_servers_that_are_a_clusters_seeds() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let src = source(&etcd.url(), Duration::ZERO);
    seed(&src, 3).await;
    let planned = EtcdSource::builder(&[etcd.url()], POOL)
        .debounce(Duration::ZERO)
        .with_next(true)
        .build();
    let f = Following::start(planned, false);
    f.wait_len(3).await;
    let seeds: Vec<Member> = (7..9).map(|i| server(i, 1)).collect();
    admin::publish_kind(&src, &seeds, shardring_etcd::Kind::RedisCluster)
        .await
        .unwrap();
    wait_for(
        || format!("the cluster refused; the follower has {}", f.describe()),
        || f.stats.errors.load(Ordering::Relaxed) > 0,
    )
    .await;
    assert_eq!(f.members().len(), 3, "the ring stays: {}", f.describe());
    // A ring again (the kind key deleted with it): followed.
    admin::publish(&src, &seeds).await.unwrap();
    f.wait_len(2).await;
    f.stop().await;
}
