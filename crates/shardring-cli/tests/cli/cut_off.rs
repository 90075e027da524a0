//! The fault-injection suite of a planned change: a real etcd, four real memcached or redis-server
//! backends, two `shardring proxy` processes following etcd each through a relay of its own, a
//! versioned read/write load through both, and `shardring migrate --etcd` taking the pool from four
//! servers to three while one proxy's path to etcd is blackholed (silently: nothing closed, nothing
//! passes), its process paused (SIGSTOP) or killed and restarted, or etcd itself stopped for longer
//! than a lease, at a chosen moment of the change. The recorded history is then checked
//! ([`test_support::history`]): no read older than a write acknowledged before it began, no
//! acknowledged write lost, on either proxy, in any phase; and `migrate` never exits 0 while a
//! participant it has seen has not acknowledged.
//!
//! Each run prints its table (reads, writes, fenced and other errors, stale reads, per phase and
//! participant) and a `cut-off summary` line; `scripts/soak-cut-off` runs the suite many times in
//! release mode and adds those lines up (its table is in BENCHMARKS.md).
//!
//! Participants are the two proxies and, in the `client_side_ring` scenarios, an application
//! embedding a client-side ring ([`shardring_etcd::Participant`]) that speaks to the servers
//! itself: it is cut off, fenced and waited for exactly as a proxy is.

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cut_off_load::{
    holds, key, moved_keys, on_first, yaml, Backends, Conn, Endpoint, Load, Migrated, Proto, Scene,
    FILLER, KEYS,
};
use crate::support::{shardring, Kill};
use shardring_etcd::{Participant, PoolRules};
use test_support::history::History;
use test_support::redis_cluster::RedisCluster;
use test_support::{free_port, wait_listening, Etcd, Relay, TempDir};

/// One proxy, following etcd through its own relay.
struct Proxy {
    file: PathBuf,
    listen: u16,
    stats: u16,
    log: PathBuf,
    relay: Relay,
    child: Option<Kill>,
}

impl Proxy {
    fn spawn(&mut self) {
        self.child = Some(spawn_proxy(
            &self.file,
            self.stats,
            &self.log,
            &self.relay.url(),
            self.listen,
        ));
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.listen)
    }
}

/// A client-side ring participant (an application embedding [`Participant`]), following etcd
/// through its own relay.
struct Ring {
    relay: Relay,
    participant: Arc<Participant>,
    id: String,
}

/// The world of one scenario.
struct World {
    proto: Proto,
    etcd: Etcd,
    _backends: Backends,
    servers: Vec<String>,
    dir: TempDir,
    now_file: PathBuf,
    proxies: Vec<Proxy>,
    /// Client-side rings: participants `proxies.len()..` in the history.
    rings: Vec<Ring>,
    history: Arc<History>,
    /// The load's keys whose owner differs between the four servers and the three (every key,
    /// onto a cluster).
    moved: std::collections::BTreeSet<usize>,
    /// The Redis Cluster the pool moves onto, when it does (instead of three of its servers).
    cluster: Option<RedisCluster>,
    runtime: tokio::runtime::Runtime,
}

impl World {
    fn start(proto: Proto) -> Option<World> {
        World::start_with(proto, 0, Next::ThreeOfFour)
    }

    /// Two proxies and `rings` client-side rings, every one registered, the keys written; the
    /// change planned is `next`.
    fn start_with(proto: Proto, rings: usize, next: Next) -> Option<World> {
        if !test_support::etcd_available() {
            return None;
        }
        let cluster = match next {
            Next::ThreeOfFour => None,
            Next::Cluster => Some(RedisCluster::start(3, 0)?),
        };
        let backends = Backends::start(proto)?;
        let servers = backends.addrs();
        let etcd = Etcd::start();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = TempDir::new("cut-off");
        let now_file = dir.path().join("now.yml");
        std::fs::write(&now_file, yaml(proto, free_port(), &servers)).unwrap();
        let next_file = dir.path().join("next.yml");
        let next_yaml = match &cluster {
            None => yaml(proto, free_port(), &servers[..3]),
            // The cluster's seeds, its pool line marked (`members publish` writes `next-kind`).
            Some(c) => yaml(proto, free_port(), &c.seeds()).replacen(
                "alpha:\n",
                "alpha:  # shardring: redis-cluster\n",
                1,
            ),
        };
        std::fs::write(&next_file, next_yaml).unwrap();
        let mut world = World {
            proto,
            etcd,
            _backends: backends,
            servers,
            dir,
            now_file,
            proxies: Vec::new(),
            rings: Vec::new(),
            history: Arc::new(History::default()),
            moved: Default::default(),
            runtime,
            cluster,
        };
        world.moved = match world.cluster {
            None => moved_keys(&world.now_file, &next_file),
            // Onto a cluster every key moves.
            Some(_) => (0..KEYS).collect(),
        };
        world.publish(&[]);
        for p in 0..2 {
            let listen = free_port();
            let file = world.dir.path().join(format!("proxy{p}.yml"));
            std::fs::write(&file, yaml(proto, listen, &world.servers)).unwrap();
            let target = format!("127.0.0.1:{}", world.etcd.client_port);
            let relay = world.runtime.block_on(Relay::start(target));
            let mut proxy = Proxy {
                file,
                listen,
                stats: free_port(),
                log: world.dir.path().join(format!("proxy{p}.log")),
                relay,
                child: None,
            };
            proxy.spawn();
            world.proxies.push(proxy);
        }
        for r in 0..rings {
            let target = format!("127.0.0.1:{}", world.etcd.client_port);
            let relay = world.runtime.block_on(Relay::start(target));
            let source = shardring_etcd::EtcdSource::builder(&[relay.url()], "alpha")
                .with_next(true)
                .build();
            let id = format!("app-ring-{r}");
            let participant = world
                .runtime
                .block_on(Participant::start(&source, &id, PoolRules::default()))
                .expect("the client-side ring starts");
            world.rings.push(Ring {
                relay,
                participant: Arc::new(participant),
                id,
            });
        }
        world.wait_live(2 + rings, Duration::from_secs(30));
        world.fill();
        Some(world)
    }

    /// `shardring members --etcd URL --pool alpha`, to add to.
    fn members(&self) -> assert_cmd::Command {
        let mut cmd = shardring();
        cmd.args(["members", "--etcd", &self.etcd.url(), "--pool", "alpha"]);
        cmd
    }

    /// `shardring members publish` of now.yml (`--next`: of next.yml).
    fn publish(&self, extra: &[&str]) {
        let file = if extra.contains(&"--next") {
            self.dir.path().join("next.yml")
        } else {
            self.now_file.clone()
        };
        self.members()
            .arg("-c")
            .arg(file)
            .arg("publish")
            .args(extra)
            .assert()
            .success();
    }

    /// The roster: (id, live) per participant.
    fn participants(&self) -> Vec<(String, bool)> {
        crate::migrate_fleet::participants(&self.etcd.url())
    }

    fn wait_live(&self, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let p = self.participants();
            if p.len() == n && p.iter().all(|(_, live)| *live) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "participants: {p:?}\n{}",
                self.proxy_logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Each proxy's ports and the end of its log: what a test that timed out waiting for them says.
    fn proxy_logs(&self) -> String {
        self.proxies
            .iter()
            .map(|p| {
                let log = std::fs::read_to_string(&p.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!(
                    "proxy on {} (stats {}), its log's end:\n{}",
                    p.addr(),
                    p.stats,
                    tail.join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn participant_count(&self) -> usize {
        self.proxies.len() + self.rings.len()
    }

    fn id_of(&self, p: usize) -> String {
        let port = format!(":{}", self.proxies[p].listen);
        self.participants()
            .into_iter()
            .find(|(id, _)| id.ends_with(&port))
            .map(|(id, _)| id)
            .expect("the proxy is in the roster")
    }

    /// The filler keys, through the first proxy.
    fn fill(&self) {
        let mut c = Conn::new(self.proxies[0].addr(), self.proto);
        for i in 0..FILLER {
            c.set(&format!("filler:{i}"), 1).unwrap();
        }
        for k in 0..KEYS {
            c.set(&key(k), 1).unwrap();
        }
    }

    /// After a change onto the cluster: etcd says the pool is one, and every key of the load is on
    /// its slot's master with the value every proxy reads.
    fn check_on_the_cluster(&self) {
        let cluster = self.cluster.as_ref().expect("a change onto a cluster");
        let kind = self.runtime.block_on(async {
            let source = shardring_etcd::EtcdSource::builder(&[self.etcd.url()], "alpha")
                .with_next(true)
                .build();
            source.read().await.expect("etcd reads").kinds
        });
        assert_eq!(
            (kind.current, kind.next),
            (
                shardring_etcd::Kind::RedisCluster,
                shardring_etcd::Kind::Ring
            ),
            "etcd's kind keys after the change"
        );
        let listed = self.members().arg("list").output().unwrap();
        assert!(
            String::from_utf8_lossy(&listed.stderr).contains("kind redis-cluster"),
            "members list says what the servers are: {}",
            String::from_utf8_lossy(&listed.stderr)
        );
        for (p, proxy) in self.proxies.iter().enumerate() {
            let mut through = Conn::new(proxy.addr(), self.proto);
            for k in 0..KEYS {
                let slot = shardring_resp::key_slot(key(k).as_bytes());
                let master = cluster.master_of_slot(slot).expect("every slot is served");
                let on_master = Conn::new(master, self.proto).get(&key(k));
                assert_eq!(
                    on_master,
                    through.get(&key(k)),
                    "{} on its slot's master and through proxy {p}",
                    key(k)
                );
                assert!(
                    matches!(on_master, Ok(Some(_))),
                    "{}: {on_master:?}",
                    key(k)
                );
            }
        }
    }

    /// Every participant, proxies first.
    fn endpoints(&self) -> Vec<Endpoint> {
        let proxies = self.proxies.iter().map(|p| Endpoint::Proxy(p.addr()));
        let rings = self
            .rings
            .iter()
            .map(|r| Endpoint::Ring(Arc::clone(&r.participant)));
        proxies.chain(rings).collect()
    }

    fn load(&self) -> Load {
        Load::start(&self.history, &self.endpoints(), self.proto)
    }

    /// [`run_migrate`] on this world (with `--all-keys` onto a cluster: every key moves).
    fn migrate(&self, extra: &[&str], on: impl FnMut(&str)) -> Migrated {
        let mut args = extra.to_vec();
        if self.cluster.is_some() {
            args.push("--all-keys");
        }
        run_migrate(&self.etcd.url(), &self.now_file, &args, on)
    }

    /// Ends the load, reads every key through every participant and checks the history
    /// ([`Scene::check`]).
    fn finish(&self, load: Load, name: &str, fenced: &[usize]) {
        let proxies: Vec<(u16, PathBuf)> = self
            .proxies
            .iter()
            .map(|p| (p.stats, p.log.clone()))
            .collect();
        Scene {
            history: &self.history,
            endpoints: self.endpoints(),
            proto: self.proto,
            moved: &self.moved,
            proxies,
        }
        .check(load, name, fenced);
    }
}

/// The change the scenario plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Three of the four servers.
    ThreeOfFour,
    /// A 3-master Redis Cluster (`members publish --next` of a marked pool: `next-kind`).
    Cluster,
}

/// Who is cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// Proxy 1 (of two).
    Proxy,
    /// The client-side ring (beside the two proxies).
    Ring,
}

/// Blackholes the path to etcd of `who` when `migrate` writes a line containing `when`; the first
/// run must fail naming it, and once its path is restored a second run (resuming) goes through.
fn blackhole_at(proto: Proto, when: &str, name: &str) {
    cut_off_at(proto, Who::Proxy, when, name);
}

fn cut_off_at(proto: Proto, who: Who, when: &str, name: &str) {
    cut_off_onto(proto, who, Next::ThreeOfFour, when, name);
}

fn cut_off_onto(proto: Proto, who: Who, next: Next, when: &str, name: &str) {
    let Some(mut w) = World::start_with(proto, usize::from(who == Who::Ring), next) else {
        return;
    };
    let (cut_off, relay, index) = match who {
        Who::Proxy => (w.id_of(1), &w.proxies[1].relay, 1),
        Who::Ring => (w.rings[0].id.clone(), &w.rings[0].relay, 2),
    };
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    let mut blackholed = false;
    let mut cut = || {
        if !blackholed {
            blackholed = true;
            w.history.phase("cut off");
            relay.blackhole();
        }
    };
    if when.is_empty() {
        cut();
        std::thread::sleep(Duration::from_secs(1));
    }
    w.publish(&["--next"]);
    let first = w.migrate(&["--confirm-timeout", "14"], |line| {
        if !when.is_empty() && line.contains(when) {
            cut();
        }
    });
    assert!(
        !first.status.success() && first.stderr.contains(&cut_off),
        "{name}: never 0 while a participant has not acknowledged, and it is named: {}",
        first.stderr
    );
    eprintln!(
        "{name}: the first migrate exited {} after {:?}",
        first.status, first.took
    );
    w.history.phase("healed");
    relay.restore();
    w.wait_live(w.participant_count(), Duration::from_secs(30));
    let second = w.migrate(&["--confirm-timeout", "30"], |_| {});
    assert!(second.status.success(), "{name}: {}", second.stderr);
    assert_eq!(
        first.stderr.contains("cut over in etcd"),
        second.stderr.contains("resuming"),
        "a change stopped after its cut-over is resumed, not reversed: {}",
        second.stderr
    );
    std::thread::sleep(Duration::from_millis(500));
    // Cut off before it knew of the change, it had nothing to fence.
    let fenced: &[usize] = if when.is_empty() { &[] } else { &[index] };
    w.finish(load, name, fenced);
    if w.cluster.is_some() {
        w.check_on_the_cluster();
        // A proxy started afresh from its file (the old servers, a ring) serves what etcd says:
        // the cluster, by its map.
        w.proxies[1].child = None;
        w.proxies[1].spawn();
        w.check_on_the_cluster();
    }
}

#[test]
fn memcached_cut_off_before_the_next_membership_is_published() {
    blackhole_at(Proto::Memcache, "", "cut off before publish");
}

#[test]
fn memcached_cut_off_during_the_copy() {
    blackhole_at(Proto::Memcache, "copying", "cut off during the copy");
}

#[test]
fn memcached_cut_off_at_the_cut_over() {
    blackhole_at(
        Proto::Memcache,
        "cut over in etcd",
        "cut off at the cut-over",
    );
}

#[test]
fn redis_cut_off_during_the_copy() {
    blackhole_at(Proto::Redis, "copying", "cut off during the copy");
}

#[test]
fn redis_cut_off_at_the_cut_over() {
    blackhole_at(Proto::Redis, "cut over in etcd", "cut off at the cut-over");
}

#[test]
fn redis_cut_off_during_the_copy_onto_a_cluster() {
    cut_off_onto(
        Proto::Redis,
        Who::Proxy,
        Next::Cluster,
        "copying",
        "cut off during the copy onto a cluster",
    );
}

#[test]
fn redis_cut_off_at_the_cut_over_onto_a_cluster() {
    cut_off_onto(
        Proto::Redis,
        Who::Proxy,
        Next::Cluster,
        "cut over in etcd",
        "cut off at the cut-over onto a cluster",
    );
}

/// A client-side ring cannot place a cluster's keys: it does not take part in a change onto one
/// (it reports no next membership), so the migration waits for it, names it, and copies nothing
/// it could miss; stopped, it leaves the roster, and the change goes through.
#[test]
fn redis_client_side_ring_holds_a_change_onto_a_cluster_until_it_stops() {
    let Some(mut w) = World::start_with(Proto::Redis, 1, Next::Cluster) else {
        return;
    };
    let ring_id = w.rings[0].id.clone();
    let load = Load::start(
        &w.history,
        &w.proxies
            .iter()
            .map(|p| Endpoint::Proxy(p.addr()))
            .collect::<Vec<_>>(),
        w.proto,
    );
    std::thread::sleep(Duration::from_millis(500));
    w.publish(&["--next"]);
    let first = w.migrate(&["--confirm-timeout", "6"], |_| {});
    assert!(
        !first.status.success() && first.stderr.contains(&ring_id),
        "never 0 while a participant cannot take part, and it is named: {}",
        first.stderr
    );
    assert!(
        !first.stderr.contains("copying"),
        "nothing is copied before every participant dual-writes: {}",
        first.stderr
    );
    let ring = w.rings.pop().expect("the ring");
    let participant = Arc::into_inner(ring.participant).expect("the only reference");
    w.runtime.block_on(participant.stop());
    let second = w.migrate(&["--confirm-timeout", "30"], |_| {});
    assert!(second.status.success(), "{}", second.stderr);
    std::thread::sleep(Duration::from_millis(500));
    w.finish(load, "client-side ring onto a cluster", &[]);
}

/// `--delete-moved` with a participant cut off and taken out of the roster by the operator: the
/// migration finishes without it, the moved keys are deleted from the leaving server, and the
/// cut-off proxy (fenced) neither serves a stale value nor writes one back there.
fn forgotten_with_delete_moved(proto: Proto) {
    let Some(w) = World::start(proto) else {
        return;
    };
    let cut_off = w.id_of(1);
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    w.publish(&["--next"]);
    let first = w.migrate(&["--confirm-timeout", "14", "--delete-moved"], |line| {
        if line.contains("copying") {
            w.history.phase("cut off");
            w.proxies[1].relay.blackhole();
        }
    });
    assert!(!first.status.success(), "{}", first.stderr);
    let deadline = Instant::now() + Duration::from_secs(30);
    while w
        .participants()
        .iter()
        .any(|(id, live)| *id == cut_off && *live)
    {
        assert!(Instant::now() < deadline, "its lease never lapsed");
        std::thread::sleep(Duration::from_millis(200));
    }
    shardring()
        .args([
            "members",
            "--etcd",
            &w.etcd.url(),
            "--pool",
            "alpha",
            "forget",
        ])
        .arg(&cut_off)
        .arg("--stopped")
        .assert()
        .success();
    w.history.phase("forgotten");
    let second = w.migrate(&["--confirm-timeout", "30", "--delete-moved"], |_| {});
    assert!(second.status.success(), "{}", second.stderr);
    std::thread::sleep(Duration::from_secs(2));
    w.history.phase("healed");
    w.proxies[1].relay.restore();
    std::thread::sleep(Duration::from_secs(3));
    w.finish(load, "forgotten, --delete-moved", &[1]);
    let leaving = &w.servers[3];
    let stray: Vec<usize> = (0..KEYS)
        .filter(|&k| holds(proto, leaving, &key(k)))
        .collect();
    assert!(
        stray.is_empty(),
        "keys written back to the removed server after --delete-moved: {stray:?}"
    );
}

#[test]
fn memcached_cut_off_forgotten_with_delete_moved() {
    forgotten_with_delete_moved(Proto::Memcache);
}

#[test]
fn redis_cut_off_forgotten_with_delete_moved() {
    forgotten_with_delete_moved(Proto::Redis);
}

/// Proxy 1 killed during the copy and started again 2 s later: the migration waits for it (its
/// roster entry) and goes through once it is back.
fn killed_and_restarted(proto: Proto) {
    let Some(mut w) = World::start(proto) else {
        return;
    };
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    w.publish(&["--next"]);
    let (rx, on) = on_first("copying");
    let killer = {
        let mut child = w.proxies[1].child.take();
        std::thread::spawn(move || {
            let _ = rx.recv();
            drop(child.take()); // SIGKILL
        })
    };
    let history = Arc::clone(&w.history);
    let proxy1 = (
        w.proxies[1].file.clone(),
        w.proxies[1].stats,
        w.proxies[1].log.clone(),
        w.proxies[1].relay.url(),
        w.proxies[1].listen,
    );
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        history.phase("restarted");
        spawn_proxy(&proxy1.0, proxy1.1, &proxy1.2, &proxy1.3, proxy1.4)
    });
    let run = w.migrate(&["--confirm-timeout", "40"], on);
    let _ = killer.join();
    w.proxies[1].child = Some(restarter.join().unwrap());
    assert!(run.status.success(), "{}", run.stderr);
    eprintln!("killed and restarted: migrate took {:?}", run.took);
    w.finish(load, "killed and restarted", &[]);
}

/// Starts `shardring proxy -c FILE -s STATS --etcd ETCD -o LOG` and waits until it listens.
fn spawn_proxy(file: &Path, stats: u16, log: &Path, etcd: &str, listen: u16) -> Kill {
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args(["proxy", "-s", &stats.to_string(), "-c"])
        .arg(file)
        .args(["--etcd", etcd, "-o"])
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(&format!("127.0.0.1:{listen}"));
    Kill(child)
}

#[test]
fn memcached_proxy_killed_and_restarted_during_the_copy() {
    killed_and_restarted(Proto::Memcache);
}

#[test]
fn redis_proxy_killed_and_restarted_during_the_copy() {
    killed_and_restarted(Proto::Redis);
}

/// etcd killed during the copy and started again after longer than a lease: every proxy fences
/// the keys that move meanwhile, registers again, and a second run finishes the change.
fn etcd_down_longer_than_a_lease(proto: Proto) {
    let Some(mut w) = World::start(proto) else {
        return;
    };
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    w.publish(&["--next"]);
    let (url, now_file, history) = (w.etcd.url(), w.now_file.clone(), Arc::clone(&w.history));
    let etcd = &mut w.etcd;
    let first = std::thread::scope(|scope| {
        let (rx, on) = on_first("copying");
        scope.spawn(move || {
            if rx.recv().is_ok() {
                history.phase("etcd down");
                etcd.kill();
                std::thread::sleep(Duration::from_secs(12));
                history.phase("etcd back");
                etcd.restart();
            }
        });
        run_migrate(&url, &now_file, &["--confirm-timeout", "10"], on)
    });
    assert!(!first.status.success(), "{}", first.stderr);
    eprintln!(
        "etcd down: the first migrate exited {} after {:?}",
        first.status, first.took
    );
    w.wait_live(w.participant_count(), Duration::from_secs(40));
    let second = w.migrate(&["--confirm-timeout", "30"], |_| {});
    assert!(second.status.success(), "{}", second.stderr);
    w.finish(load, "etcd down longer than a lease", &[0, 1]);
}

/// Runs `shardring migrate --etcd URL` (at a rate that makes the copy last a few seconds), calling
/// `on` with each line it writes to stderr as it writes it.
fn run_migrate(url: &str, now_file: &Path, extra: &[&str], on: impl FnMut(&str)) -> Migrated {
    let mut cmd = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"));
    cmd.args([
        "migrate", "--etcd", url, "--pool", "alpha", "--nice", "0", "--rate", "150", "-c",
    ])
    .arg(now_file)
    .args(extra);
    crate::cut_off_load::watch_migrate(&mut cmd, on)
}

#[test]
fn memcached_etcd_down_longer_than_a_lease_during_the_copy() {
    etcd_down_longer_than_a_lease(Proto::Memcache);
}

#[test]
fn redis_etcd_down_longer_than_a_lease_during_the_copy() {
    etcd_down_longer_than_a_lease(Proto::Redis);
}

#[test]
fn redis_cut_off_before_the_next_membership_is_published() {
    blackhole_at(Proto::Redis, "", "cut off before publish");
}

#[test]
fn memcached_client_side_ring_cut_off_during_the_copy() {
    cut_off_at(
        Proto::Memcache,
        Who::Ring,
        "copying",
        "client-side ring cut off during the copy",
    );
}

#[test]
fn redis_client_side_ring_cut_off_at_the_cut_over() {
    cut_off_at(
        Proto::Redis,
        Who::Ring,
        "cut over in etcd",
        "client-side ring cut off at the cut-over",
    );
}

#[test]
fn memcached_client_side_ring_cut_off_before_the_next_membership_is_published() {
    cut_off_at(
        Proto::Memcache,
        Who::Ring,
        "",
        "client-side ring cut off before publish",
    );
}

/// Proxy 1 paused (SIGSTOP) during the copy for longer than its lease, then continued: the
/// migration waits for it; once running again it refuses the keys that move until its place in
/// etcd is confirmed (requests it took while stopped included), and the change goes through.
fn paused_during_the_copy(proto: Proto) {
    let Some(w) = World::start(proto) else {
        return;
    };
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    w.publish(&["--next"]);
    let pid = w.proxies[1]
        .child
        .as_ref()
        .map(|k| k.0.id().to_string())
        .expect("proxy 1 runs");
    let (rx, on) = on_first("copying");
    let history = Arc::clone(&w.history);
    let pauser = std::thread::spawn(move || {
        if rx.recv().is_ok() {
            history.phase("paused");
            crate::support::signal("-STOP", &pid);
            std::thread::sleep(Duration::from_secs(12));
            history.phase("continued");
            crate::support::signal("-CONT", &pid);
        }
    });
    let run = w.migrate(&["--confirm-timeout", "40"], on);
    let _ = pauser.join();
    assert!(run.status.success(), "{}", run.stderr);
    eprintln!("paused: migrate took {:?}", run.took);
    w.finish(load, "paused during the copy", &[]);
}

#[test]
fn memcached_proxy_paused_during_the_copy() {
    paused_during_the_copy(Proto::Memcache);
}

#[test]
fn redis_proxy_paused_during_the_copy() {
    paused_during_the_copy(Proto::Redis);
}
