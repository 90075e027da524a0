//! The fault-injection suite of a planned change without etcd (issue #43): four real memcached or
//! redis-server backends, two `shardring proxy` processes reading their own YAML file and a shared
//! `--next-config` file, a versioned read/write load through both, and `shardring migrate --to`
//! taking the pool from four servers to three while one proxy's stats port (what `migrate` asks
//! each proxy through) is unreachable (blackholed: connections hang), its process is paused
//! (SIGSTOP) or killed and restarted, at a chosen moment of the change. The recorded history is
//! then checked as in [`crate::cut_off`] ([`crate::cut_off_load::Scene::check`]): no read older than a
//! write acknowledged before it began, no acknowledged write lost; and `migrate` never exits 0
//! while a proxy has not been confirmed.
//!
//! A first run stopped after its cut-over leaves the files swapped (the new servers current, the
//! old ones next) and a mark in the `--to` file; the rerun an operator makes must resume that
//! change, never take the swapped files for a change back (issue #43's bug).
//!
//! Each proxy's stats port is reached through a [`Relay`] of its own, so that one can be made
//! unreachable while the proxy itself keeps serving (and reloading on SIGHUP).

use std::path::PathBuf;
use std::process::{Command as StdCommand, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::cut_off_load::{
    holds, key, moved_keys, on_first, yaml, Backends, Conn, Endpoint, Load, Migrated, Proto, Scene,
    FILLER, KEYS,
};
use crate::support::Kill;
use test_support::history::History;
use test_support::{free_port, wait_listening, Relay, TempDir};

/// Filler key `i`: spread over the ring as the load's keys are ([`key`]), so that some are on the
/// server that leaves whatever its port (`filler:{i}` may all land elsewhere under fnv1a_64).
fn filler(i: usize) -> String {
    format!(
        "{:016x}:filler",
        (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

/// One proxy: its files, ports and process.
struct Proxy {
    file: PathBuf,
    listen: u16,
    stats: u16,
    /// The relay `migrate` reaches the stats port through.
    relay: Relay,
    log: PathBuf,
    /// Its pid file (`-p`): what the reload command signals, so a restarted proxy is reloaded too.
    pid_file: PathBuf,
    child: Option<Kill>,
}

impl Proxy {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.listen)
    }

    /// Its stats port as `migrate` knows it (through the relay).
    fn name(&self) -> String {
        format!("127.0.0.1:{}", self.relay.port)
    }

    fn pid(&self) -> String {
        self.child
            .as_ref()
            .map(|k| k.0.id().to_string())
            .expect("the proxy runs")
    }
}

/// Starts `shardring proxy -c FILE --next-config NEXT -s STATS -o LOG -p PID` and waits until it
/// listens and answers on its stats port.
fn spawn_proxy(
    file: &std::path::Path,
    next: &std::path::Path,
    listen: u16,
    stats: u16,
    log: &std::path::Path,
    pid_file: &std::path::Path,
) -> Kill {
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args(["proxy", "-s", &stats.to_string(), "-c"])
        .arg(file)
        .arg("--next-config")
        .arg(next)
        .arg("-o")
        .arg(log)
        .arg("-p")
        .arg(pid_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(&format!("127.0.0.1:{listen}"));
    wait_listening(&format!("127.0.0.1:{stats}"));
    Kill(child)
}

/// The world of one scenario.
struct World {
    proto: Proto,
    _backends: Backends,
    servers: Vec<String>,
    dir: TempDir,
    /// The `--to` file: the proxies' `--next-config`.
    next_file: PathBuf,
    proxies: Vec<Proxy>,
    history: Arc<History>,
    /// The load's keys whose owner differs between the four servers and the three.
    moved: std::collections::BTreeSet<usize>,
    /// Carries the relays.
    runtime: tokio::runtime::Runtime,
}

impl World {
    /// Two proxies over four servers, no change planned yet (the next file lists the same
    /// servers), the keys written.
    fn start(proto: Proto) -> Option<World> {
        let backends = Backends::start(proto)?;
        let servers = backends.addrs();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = TempDir::new("cut-off-files");
        let next_file = dir.path().join("next.yml");
        std::fs::write(&next_file, yaml(proto, free_port(), &servers)).unwrap();
        let mut world = World {
            proto,
            _backends: backends,
            servers,
            dir,
            next_file,
            proxies: Vec::new(),
            history: Arc::new(History::default()),
            moved: Default::default(),
            runtime,
        };
        for p in 0..2 {
            let listen = free_port();
            let file = world.dir.path().join(format!("proxy{p}.yml"));
            std::fs::write(&file, yaml(proto, listen, &world.servers)).unwrap();
            let stats = free_port();
            let relay = world
                .runtime
                .block_on(Relay::start(format!("127.0.0.1:{stats}")));
            let (log, pid_file) = (
                world.dir.path().join(format!("proxy{p}.log")),
                world.dir.path().join(format!("proxy{p}.pid")),
            );
            let child = spawn_proxy(&file, &world.next_file, listen, stats, &log, &pid_file);
            world.proxies.push(Proxy {
                file,
                listen,
                stats,
                relay,
                log,
                pid_file,
                child: Some(child),
            });
        }
        let planned = world.planned();
        world.moved = moved_keys(&world.proxies[0].file, &planned);
        world.fill();
        Some(world)
    }

    /// The file of the change: the pool over the first three servers.
    fn planned(&self) -> PathBuf {
        let path = self.dir.path().join("planned.yml");
        std::fs::write(&path, yaml(self.proto, free_port(), &self.servers[..3])).unwrap();
        path
    }

    /// The filler keys and the load's, through the first proxy.
    fn fill(&self) {
        let mut c = Conn::new(self.proxies[0].addr(), self.proto);
        for i in 0..FILLER {
            c.set(&filler(i), 1).unwrap();
        }
        for k in 0..KEYS {
            c.set(&key(k), 1).unwrap();
        }
    }

    /// Plans the change: the next file lists three servers, and the proxies reload it (they
    /// dual-write from then on; `migrate` waits for that).
    fn plan(&self) {
        std::fs::copy(self.planned(), &self.next_file).unwrap();
        for p in &self.proxies {
            crate::support::signal("-HUP", &p.pid());
        }
    }

    fn endpoints(&self) -> Vec<Endpoint> {
        self.proxies
            .iter()
            .map(|p| Endpoint::Proxy(p.addr()))
            .collect()
    }

    fn load(&self) -> Load {
        Load::start(&self.history, &self.endpoints(), self.proto)
    }

    /// `shardring migrate -c proxy0.yml -c proxy1.yml --to next.yml` with the proxies' stats ports
    /// (through their relays) and a reload command that signals every proxy whose pid file exists
    /// (at a rate that makes the copy last a second or so), calling `on` with each line it writes
    /// to stderr as it writes it.
    fn migrate(&self, extra: &[&str], on: impl FnMut(&str)) -> Migrated {
        let proxies: Vec<String> = self.proxies.iter().map(Proxy::name).collect();
        let pid_files: Vec<String> = self
            .proxies
            .iter()
            .map(|p| p.pid_file.display().to_string())
            .collect();
        let reload = format!("cat {} 2>/dev/null | xargs kill -HUP", pid_files.join(" "));
        let mut cmd = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"));
        cmd.arg("migrate");
        for p in &self.proxies {
            cmd.arg("-c").arg(&p.file);
        }
        cmd.arg("--to")
            .arg(&self.next_file)
            .args(["--pool", "alpha", "--proxies", &proxies.join(",")])
            .args(["--reload-command", &reload])
            .args(["--nice", "0", "--rate", "150"])
            .args(extra);
        crate::cut_off_load::watch_migrate(&mut cmd, on)
    }

    /// Every file names the three servers and not the fourth, and the next file has no mark.
    fn assert_done(&self) {
        let files = self.proxies.iter().map(|p| &p.file);
        for f in files.chain([&self.next_file]) {
            let text = std::fs::read_to_string(f).unwrap();
            for s in &self.servers[..3] {
                assert!(text.contains(s), "{} lacks {s}:\n{text}", f.display());
            }
            assert!(
                !text.contains(&self.servers[3]),
                "{} still has {}:\n{text}",
                f.display(),
                self.servers[3]
            );
            assert!(
                !text.contains("shardring migrate cut over"),
                "{} keeps the mark:\n{text}",
                f.display()
            );
        }
    }

    /// Ends the load, reads every key through both proxies and checks the history.
    fn finish(&self, load: Load, name: &str) {
        let proxies: Vec<(u16, PathBuf)> = self
            .proxies
            .iter()
            .map(|p| (p.stats, p.log.clone()))
            .collect();
        let checked = Scene {
            history: &self.history,
            endpoints: self.endpoints(),
            proto: self.proto,
            moved: &self.moved,
            proxies,
        }
        .check(load, name, &[]);
        eprintln!(
            "cut-off-files check\t{name}\t{:?}\tstale={}\tlost={}\treads={}\twrites={}",
            self.proto, checked.stale, checked.lost, checked.reads, checked.writes
        );
    }

    /// With --delete-moved: none of the load's keys is left on the server that left.
    fn assert_nothing_left_behind(&self) {
        let leaving = &self.servers[3];
        let stray: Vec<usize> = (0..KEYS)
            .filter(|&k| holds(self.proto, leaving, &key(k)))
            .collect();
        assert!(
            stray.is_empty(),
            "keys on the removed server after --delete-moved: {stray:?}"
        );
    }
}

/// What a run did, for the log (and the table of issue #43).
fn report(name: &str, proto: Proto, run: &str, m: &Migrated) {
    eprintln!(
        "cut-off-files run\t{name}\t{proto:?}\t{run}\texit={:?}\ttook={:.1}s",
        m.status.code(),
        m.took.as_secs_f64()
    );
}

/// Proxy 1's stats port blackholed when `migrate` writes a line containing `when` (with
/// `--delete-moved` if `delete`): the first run must not exit 0 and must name it; once it is
/// reachable again, a rerun of the same command resumes the change (never reverses it) and exits 0.
fn unreachable_at(proto: Proto, when: &'static str, name: &str, delete: bool) {
    let Some(w) = World::start(proto) else {
        return;
    };
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    w.plan();
    let extra: &[&str] = if delete { &["--delete-moved"] } else { &[] };
    let (rx, on) = on_first(when);
    let world = &w;
    let first = std::thread::scope(|scope| {
        scope.spawn(move || {
            if rx.recv().is_ok() {
                world.history.phase("unreachable");
                world.proxies[1].relay.blackhole();
            }
        });
        w.migrate(&[&["--confirm-timeout", "4"], extra].concat(), on)
    });
    report(name, proto, "first", &first);
    let cut_over = first.stderr.contains("shardring: cut over in the files");
    assert!(
        first.status.code() == Some(2) && first.stderr.contains(&w.proxies[1].name()),
        "{name}: never 0 while a proxy has not been confirmed, and it is named: {}",
        first.stderr
    );
    assert!(cut_over, "{name}: the first run cut over: {}", first.stderr);
    let marked = std::fs::read_to_string(&w.next_file).unwrap();
    assert!(
        marked.starts_with("# shardring migrate cut over: pool=alpha from="),
        "the next file is marked: {marked}"
    );
    w.history.phase("reachable");
    w.proxies[1].relay.restore();
    let second = w.migrate(&[&["--confirm-timeout", "20"], extra].concat(), |_| {});
    report(name, proto, "second", &second);
    assert!(second.status.success(), "{name}: {}", second.stderr);
    assert!(
        second.stderr.contains("resuming"),
        "a change stopped after its cut-over is resumed, not reversed: {}",
        second.stderr
    );
    w.assert_done();
    std::thread::sleep(Duration::from_millis(500));
    w.finish(load, name);
    if delete {
        w.assert_nothing_left_behind();
    }
}

#[test]
fn memcached_stats_port_unreachable_during_the_copy() {
    unreachable_at(
        Proto::Memcache,
        "copying",
        "stats unreachable during the copy",
        false,
    );
}

#[test]
fn memcached_stats_port_unreachable_at_the_cut_over() {
    unreachable_at(
        Proto::Memcache,
        "cut over in the files",
        "stats unreachable at the cut-over",
        false,
    );
}

#[test]
fn redis_stats_port_unreachable_at_the_cut_over() {
    unreachable_at(
        Proto::Redis,
        "cut over in the files",
        "stats unreachable at the cut-over",
        false,
    );
}

/// Proxy 1 paused (SIGSTOP) at the cut-over of a run with `--delete-moved`: that run must stop
/// before deleting anything (a paused proxy may still read the old servers once continued); the
/// proxy is continued after it, and a rerun resumes the change and deletes the moved keys.
fn paused_at_the_cut_over(proto: Proto) {
    let name = "paused at the cut-over, --delete-moved";
    let Some(w) = World::start(proto) else {
        return;
    };
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    w.plan();
    let pid = w.proxies[1].pid();
    let first = w.migrate(&["--confirm-timeout", "4", "--delete-moved"], |line| {
        if line.contains("cut over in the files") {
            w.history.phase("paused");
            crate::support::signal("-STOP", &pid);
        }
    });
    report(name, proto, "first", &first);
    w.history.phase("continued");
    crate::support::signal("-CONT", &pid);
    assert!(
        first.status.code() == Some(2) && first.stderr.contains(&w.proxies[1].name()),
        "never 0 while a proxy has not been confirmed, and it is named: {}",
        first.stderr
    );
    // The filler keys are written once, before the change: any of them still on the server that
    // leaves shows that the first run deleted nothing.
    let leaving = &w.servers[3];
    assert!(
        (0..FILLER).any(|i| holds(proto, leaving, &filler(i))),
        "nothing deleted by the first run: {}",
        first.stderr
    );
    let second = w.migrate(&["--confirm-timeout", "20", "--delete-moved"], |_| {});
    report(name, proto, "second", &second);
    assert!(second.status.success(), "{}", second.stderr);
    assert!(second.stderr.contains("resuming"), "{}", second.stderr);
    w.assert_done();
    std::thread::sleep(Duration::from_millis(500));
    w.finish(load, name);
    w.assert_nothing_left_behind();
}

#[test]
fn memcached_proxy_paused_at_the_cut_over_with_delete_moved() {
    paused_at_the_cut_over(Proto::Memcache);
}

#[test]
fn redis_proxy_paused_at_the_cut_over_with_delete_moved() {
    paused_at_the_cut_over(Proto::Redis);
}

/// Proxy 1 killed (SIGKILL) during the copy and started again 2 s later with the same files: it
/// reads whatever they say by then, is reloaded with the others (its pid file is new), and the
/// run waits for it and goes through.
fn killed_and_restarted(proto: Proto) {
    let name = "killed and restarted during the copy";
    let Some(mut w) = World::start(proto) else {
        return;
    };
    let load = w.load();
    std::thread::sleep(Duration::from_millis(500));
    w.plan();
    let (rx, on) = on_first("copying");
    let p = &mut w.proxies[1];
    let (file, listen, stats, log, pid_file) = (
        p.file.clone(),
        p.listen,
        p.stats,
        p.log.clone(),
        p.pid_file.clone(),
    );
    let mut child = p.child.take();
    let (history, next) = (Arc::clone(&w.history), w.next_file.clone());
    let restarter = std::thread::spawn(move || {
        rx.recv().ok()?;
        history.phase("killed");
        // The pid file first: the reload command must not signal a pid that is gone.
        let _ = std::fs::remove_file(&pid_file);
        drop(child.take()); // SIGKILL
        std::thread::sleep(Duration::from_secs(2));
        history.phase("restarted");
        Some(spawn_proxy(&file, &next, listen, stats, &log, &pid_file))
    });
    let run = w.migrate(&["--confirm-timeout", "20"], on);
    let restarted = restarter.join().unwrap();
    assert!(restarted.is_some(), "the run copied: {}", run.stderr);
    w.proxies[1].child = restarted;
    report(name, proto, "first", &run);
    assert!(run.status.success(), "{}", run.stderr);
    w.assert_done();
    std::thread::sleep(Duration::from_millis(500));
    w.finish(load, name);
}

#[test]
fn memcached_proxy_killed_and_restarted_during_the_copy() {
    killed_and_restarted(Proto::Memcache);
}
