//! Measures membership from etcd: ring rebuild time for 100 and 1000 servers, the time from an etcd write
//! to every follower's new ring (p50/p99 over 100 changes, without and with the default debounce), and
//! what each fault does, timed. Starts its own etcd (Debian's `etcd-server`) on free 127.0.0.1 ports.
//!
//! Run with `scripts/bench-membership` (a release build); prints Markdown.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{CompactionOptions, DeleteOptions};
use shardring::hash::TwemproxyHash;
use shardring::membership::{Follower, Member, MembershipSnapshot};
use shardring::shared::SharedRing;
use shardring::Ring;
use shardring_etcd::{admin, follow, twemproxy_ketama, EtcdSource, FollowStats};
use test_support::{Etcd, Relay};
use tokio_util::sync::CancellationToken;

fn build(members: &[Member]) -> Result<Ring, shardring::Error> {
    twemproxy_ketama(members, TwemproxyHash::Fnv1a64, None)
}

fn server(i: u32, weight: u32) -> Member {
    Member::new(
        format!("10.{}.{}.{}:11211", i / 65536, (i / 256) % 256, i % 256),
        format!("10.{}.{}.{}:11211", i / 65536, (i / 256) % 256, i % 256),
        weight,
    )
    .expect("a valid member")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn rebuild() {
    println!("## Ring rebuild (one snapshot applied: build the twemproxy ketama ring, publish)\n");
    println!(
        "| servers | build, median of 21 | Follower::apply (one weight changed), median of 21 |"
    );
    println!("|---|---|---|");
    for n in [100u32, 1000] {
        let members: Vec<Member> = (0..n).map(|i| server(i, 1 + i % 3)).collect();
        let mut builds = Vec::new();
        for _ in 0..21 {
            let t = Instant::now();
            let ring = build(&members).expect("ring");
            builds.push(t.elapsed());
            std::hint::black_box(ring);
        }
        builds.sort();
        let shared = Arc::new(SharedRing::new(Ring::default()));
        let mut follower = Follower::new(Arc::clone(&shared), build);
        let mut applies = Vec::new();
        for round in 0..22u64 {
            let mut m = members.clone();
            m[0] = server(0, 1 + (round % 2) as u32 * 4);
            let snapshot = MembershipSnapshot::new(round + 1, m).expect("snapshot");
            let t = Instant::now();
            follower.apply(snapshot).expect("applied");
            if round > 0 {
                applies.push(t.elapsed());
            }
        }
        applies.sort();
        println!(
            "| {n} | {} | {} |",
            ms(percentile(&builds, 0.5)),
            ms(percentile(&applies, 0.5))
        );
    }
    println!();
}

fn source(url: &str, debounce: Duration) -> EtcdSource {
    EtcdSource::builder(&[url], "alpha")
        .debounce(debounce)
        .retry_min(Duration::from_millis(100))
        .retry_max(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(1))
        .build()
}

struct Followers {
    rings: Vec<Arc<SharedRing<Ring>>>,
    stats: Vec<Arc<FollowStats>>,
    stop: CancellationToken,
}

impl Followers {
    fn start(url: &str, n: usize, debounce: Duration) -> Followers {
        let stop = CancellationToken::new();
        let mut rings = Vec::new();
        let mut stats = Vec::new();
        for _ in 0..n {
            let ring = Arc::new(SharedRing::new(Ring::default()));
            let st = Arc::new(FollowStats::default());
            let (r, s, stop, src) = (
                Arc::clone(&ring),
                Arc::clone(&st),
                stop.clone(),
                source(url, debounce),
            );
            tokio::spawn(async move {
                let mut f = Follower::new(r, build);
                follow(&src, &mut f, &s, stop).await;
            });
            rings.push(ring);
            stats.push(st);
        }
        Followers { rings, stats, stop }
    }

    fn generations(&self) -> Vec<u64> {
        self.rings.iter().map(|r| r.generation()).collect()
    }

    fn all_have(&self, len: usize) -> bool {
        self.rings.iter().all(|r| r.load().len() == len)
    }

    /// Waits (polling every 50 µs) until `ok` holds, up to `limit`; the time it took.
    async fn wait(&self, limit: Duration, ok: impl Fn(&Followers) -> bool) -> Option<Duration> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if ok(self) {
                return Some(t.elapsed());
            }
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
        None
    }
}

async fn latency(etcd: &Etcd, debounce: Duration) {
    let url = etcd.url();
    let src = source(&url, debounce);
    let base: Vec<Member> = (0..10).map(|i| server(i, 1)).collect();
    admin::publish(&src, &base).await.expect("publish");
    let f = Followers::start(&url, 3, debounce);
    f.wait(Duration::from_secs(10), |f| f.all_have(10))
        .await
        .expect("followers start");
    let mut times = Vec::new();
    for i in 0..100u32 {
        let before = f.generations();
        let t = Instant::now();
        // Alternately re-weight one server and add / remove another: every write changes the ring.
        match i % 3 {
            0 => {
                admin::put_member(&src, &server(3, if (i / 3) % 2 == 0 { 3 } else { 1 }), None)
                    .await
            }
            1 => admin::put_member(&src, &server(50, 1), None).await,
            _ => admin::remove_member(&src, server(50, 1).name()).await,
        }
        .expect("write");
        f.wait(Duration::from_secs(10), |f| {
            f.generations().iter().zip(&before).all(|(g, b)| g > b)
        })
        .await
        .expect("every follower changes ring");
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "| {} | 3 | 100 | {} | {} | {} |",
        ms(debounce),
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(*times.last().expect("times"))
    );
    f.stop.cancel();
}

async fn faults() {
    println!("## Faults (3 followers, debounce 0, back-off 100 ms doubling to 2 s)\n");
    println!("| fault | what happened | measured |");
    println!("|---|---|---|");
    let mut etcd = Etcd::start();
    let url = etcd.url();
    let src = source(&url, Duration::ZERO);
    admin::publish(&src, &(0..10).map(|i| server(i, 1)).collect::<Vec<_>>())
        .await
        .expect("publish");

    // Unreachable at start.
    let closed = format!("http://127.0.0.1:{}", test_support::free_port());
    let t = Instant::now();
    let err = source(&closed, Duration::ZERO).read().await;
    println!(
        "| etcd unreachable at start | `read` fails: {} | error after {} |",
        if err.is_err() {
            "connection refused"
        } else {
            "UNEXPECTED SUCCESS"
        },
        ms(t.elapsed())
    );

    let f = Followers::start(&url, 3, Duration::ZERO);
    f.wait(Duration::from_secs(10), |f| f.all_have(10))
        .await
        .expect("start");

    // Killed mid-run, restarted.
    let gen_before = f.generations();
    let errors_before: Vec<u64> = f
        .stats
        .iter()
        .map(|s| s.errors.load(Ordering::Relaxed))
        .collect();
    assert_eq!(errors_before, vec![0; 3], "no loss before the kill");
    let t = Instant::now();
    etcd.kill();
    let lost = f
        .wait(Duration::from_secs(10), |f| {
            f.stats.iter().all(|s| s.errors.load(Ordering::Relaxed) > 0)
        })
        .await
        .map(|_| t.elapsed());
    let still = f
        .rings
        .iter()
        .all(|r| r.load().len() == 10 && r.load().lookup("k").is_some());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let unchanged_while_down = f.generations() == gen_before;
    let t_restart = Instant::now();
    etcd.restart();
    let restarted = t_restart.elapsed();
    let t_write = Instant::now();
    admin::put_member(&src, &server(60, 1), None)
        .await
        .expect("write after restart");
    let caught = f
        .wait(Duration::from_secs(15), |f| f.all_have(11))
        .await
        .map(|_| t_write.elapsed());
    println!(
        "| etcd killed (SIGKILL) mid-run, restarted 2 s later | rings kept serving ({}; generation unchanged: {}), every follower reported the loss, reconnected with back-off, resumed the watch | loss seen by all after {}; etcd restart took {}; a write after the restart reached every ring after {} |",
        if still { "10 servers, lookups answered" } else { "RING LOST" },
        unchanged_while_down,
        lost.map_or("never".into(), ms),
        ms(restarted),
        caught.map_or("never".into(), ms),
    );
    f.stop.cancel();

    // Compaction past the watched revision (the followers cut off by a relay meanwhile).
    let relay = Relay::start(format!("127.0.0.1:{}", etcd.client_port)).await;
    let f = Followers::start(&relay.url(), 3, Duration::ZERO);
    f.wait(Duration::from_secs(10), |f| f.all_have(11))
        .await
        .expect("start");
    relay.cut();
    for i in 70..75 {
        admin::put_member(&src, &server(i, 1), None)
            .await
            .expect("write");
    }
    let latest = admin::remove_member(&src, server(60, 1).name())
        .await
        .expect("write");
    let mut client = admin::client(&src).await.expect("client");
    client
        .compact(latest, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    let gens = f.generations();
    relay.restore();
    let caught = f.wait(Duration::from_secs(15), |f| f.all_have(15)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rings_built: Vec<u64> = f
        .generations()
        .iter()
        .zip(&gens)
        .map(|(a, b)| a - b)
        .collect();
    println!(
        "| compaction past the watched revision (6 changes while cut off, then compacted) | the resumed watch was cancelled as compacted; each follower read the pool afresh (new rings built per follower: {rings_built:?}) | every ring right {} after the connection came back (includes the back-off) |",
        caught.map_or("never".into(), ms)
    );
    f.stop.cancel();
    drop(relay);

    let f = Followers::start(&url, 3, Duration::ZERO);
    f.wait(Duration::from_secs(10), |f| f.all_have(15))
        .await
        .expect("start");
    // A lease that expires.
    let lease = client.lease_grant(2, None).await.expect("lease").id();
    let t = Instant::now();
    admin::put_member(&src, &server(90, 1), Some(lease))
        .await
        .expect("put");
    let joined = f
        .wait(Duration::from_secs(5), |f| f.all_have(16))
        .await
        .map(|_| t.elapsed());
    let left = f
        .wait(Duration::from_secs(10), |f| f.all_have(15))
        .await
        .map(|_| t.elapsed());
    println!(
        "| a server under a 2 s lease, never kept alive | joined every ring, then left every ring when etcd expired the lease | joined after {}; gone {} after the put |",
        joined.map_or("never".into(), ms),
        left.map_or("never".into(), ms)
    );

    // A malformed value.
    let key = src.keys().server_key(server(5, 1).name());
    client
        .put(key.as_str(), "not-an-address", None)
        .await
        .expect("put");
    let skipped = f
        .wait(Duration::from_secs(5), |f| {
            f.all_have(14)
                && f.stats
                    .iter()
                    .all(|s| s.malformed.load(Ordering::Relaxed) == 1)
        })
        .await;
    println!(
        "| a malformed value (`not-an-address`) | that server skipped (left the ring), logged, counted once per follower; the other 14 applied | applied after {} |",
        skipped.map_or("never".into(), ms)
    );

    // An empty snapshot.
    let errors: Vec<u64> = f
        .stats
        .iter()
        .map(|s| s.errors.load(Ordering::Relaxed))
        .collect();
    client
        .delete(
            src.keys().servers_prefix(),
            Some(DeleteOptions::new().with_prefix()),
        )
        .await
        .expect("delete");
    let refused = f
        .wait(Duration::from_secs(5), |f| {
            f.stats
                .iter()
                .zip(&errors)
                .all(|(s, e)| s.errors.load(Ordering::Relaxed) > *e)
        })
        .await;
    println!(
        "| every server deleted (empty snapshot) | refused by every follower; each kept its 14-server ring ({}) | refused after {} |",
        if f.all_have(14) { "checked" } else { "RING CHANGED" },
        refused.map_or("never".into(), ms)
    );
    f.stop.cancel();
    println!();
}

#[tokio::main]
async fn main() {
    if !test_support::etcd_available() {
        std::process::exit(1);
    }
    rebuild();
    println!("## From an etcd write to every follower's new ring\n");
    println!("The time from sending the write until all followers (each with its own connection) have published the new ring; 100 changes (re-weight, add, remove in turn) over a 10-server pool.\n");
    println!("| debounce | followers | changes | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    let etcd = Etcd::start();
    latency(&etcd, Duration::ZERO).await;
    drop(etcd);
    let etcd = Etcd::start();
    latency(&etcd, Duration::from_millis(100)).await;
    drop(etcd);
    println!();
    faults().await;
}
