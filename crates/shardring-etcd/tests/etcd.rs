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
    assert!(
        wait_until(Duration::from_secs(5), || a.members().len() == 6
            && b.members().len() == 6)
        .await
    );

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
    let last_write = Instant::now();
    let fin = src.read().await.unwrap().snapshot;
    let want = expected(&fin);
    let (mut at_a, mut at_b) = (None, None);
    let reached = wait_until(Duration::from_secs(5), || {
        if at_a.is_none() && a.members() == want {
            at_a = Some(Instant::now());
        }
        if at_b.is_none() && b.members() == want {
            at_b = Some(Instant::now());
        }
        at_a.is_some() && at_b.is_some()
    })
    .await;
    if fin.is_empty() {
        // The follower refuses an empty pool; both keep their last ring then. (Not with this seed.)
        return;
    }
    assert!(
        reached,
        "followers {:?} / {:?}, etcd {want:?}",
        a.members(),
        b.members()
    );
    let (at_a, at_b) = (at_a.unwrap(), at_b.unwrap());
    let apart = if at_a > at_b {
        at_a - at_b
    } else {
        at_b - at_a
    };
    // Two followers disagree for no longer than the debounce (plus scheduling slack on a busy machine).
    assert!(
        apart <= debounce + Duration::from_millis(150),
        "apart {apart:?}"
    );
    assert!(at_a.max(at_b) - last_write <= debounce + Duration::from_millis(500));
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
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 2).await);
    let generation = f.shared.generation();
    // Five servers published at once: one revision, so one new ring, not five.
    let members: Vec<Member> = (0..7).map(|i| server(i, 2)).collect();
    admin::publish(&src, &members).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 7).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
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
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 2).await);
    let generation = f.shared.generation();
    let started = Instant::now();
    for i in 2..12 {
        admin::put_member(&src, &server(i, 1), None).await.unwrap();
    }
    let burst = started.elapsed();
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 12).await);
    tokio::time::sleep(debounce).await;
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
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 4).await);
    let before = f.shared.generation();
    let owner = f.shared.load().lookup("k").map(|n| n.name().to_string());

    etcd.kill();
    assert!(
        wait_until(Duration::from_secs(5), || f
            .stats
            .errors
            .load(Ordering::Relaxed)
            > 0)
        .await,
        "the loss is counted"
    );
    // The ring keeps serving while etcd is away.
    assert_eq!(f.shared.generation(), before);
    assert_eq!(
        f.shared.load().lookup("k").map(|n| n.name().to_string()),
        owner
    );

    etcd.restart();
    admin::put_member(&src, &server(9, 1), None).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || f.members().len() == 5).await,
        "caught up: {:?}",
        f.members()
    );
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
    assert!(wait_until(Duration::from_secs(5), || shared.load().len() == 3).await);

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
    assert!(
        wait_until(Duration::from_secs(10), || members_of(&shared.load())
            == want)
        .await,
        "after the resync: {:?}, etcd {want:?}, log {:?}",
        members_of(&shared.load()),
        log.lock().unwrap()
    );
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
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 2).await);
    let mut client = admin::client(&src).await.unwrap();
    let lease = client.lease_grant(2, None).await.unwrap().id();
    admin::put_member(&src, &server(5, 1), Some(lease))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 3).await);
    // Nobody keeps the lease alive: the server vanishes when it expires.
    let started = Instant::now();
    assert!(
        wait_until(Duration::from_secs(8), || f.members().len() == 2).await,
        "{:?}",
        f.members()
    );
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(!f.members().iter().any(|(n, _)| n == "cache-5"));
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
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 3).await);

    let mut client = admin::client(&src).await.unwrap();
    let key = src.keys().server_key("cache-1");
    client
        .put(key.as_str(), "not an address", None)
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || f.members().len() == 2).await);
    assert_eq!(f.stats.malformed.load(Ordering::Relaxed), 1);
    assert!(!f.members().iter().any(|(n, _)| n == "cache-1"));
    // A malformed key read by the initial range is skipped too.
    let late = Following::start(source(&etcd.url(), Duration::ZERO), false);
    assert!(wait_until(Duration::from_secs(5), || late.members().len() == 2).await);
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
    assert!(wait_until(Duration::from_secs(5), || lenient.members().is_empty()).await);
    assert!(
        wait_until(Duration::from_secs(5), || f
            .stats
            .errors
            .load(Ordering::Relaxed)
            > errors)
        .await
    );
    assert_eq!(f.members().len(), 2);
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
