//! `shardring proxy` run as nutcracker's init scripts, units and logrotate run nutcracker: every flag of
//! its command line, the signals (USR1/USR2 harmless, TTIN/TTOU move the log level, SIGHUP reopens a
//! moved log file), `-d -p` (detached, pid file right, removed on exit), JSON logs, and the errors an
//! operator reads (which port could not be bound, too many threads).

use std::path::Path;
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use crate::support::{shardring, signal};
use predicates::prelude::*;
use test_support::{free_port, wait_listening, TempDir};

/// A pool file with one (absent) server: the proxy serves it without connecting anywhere.
fn pool_file(dir: &Path, listen: u16) -> std::path::PathBuf {
    let path = dir.join("nutcracker.yml");
    std::fs::write(
        &path,
        format!("alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:9:1 cache-a\n"),
    )
    .unwrap();
    path
}

/// A proxy child, sent SIGKILL on drop if it still runs.
struct Proxy {
    child: Child,
    pid: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the proxy on `config` logging to `log` with `flags`; returns once its pool listens.
fn start(config: &Path, listen: u16, log: &Path, flags: &[&str]) -> Proxy {
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
        .args(["proxy", "-s", &free_port().to_string(), "-c"])
        .arg(config)
        .arg("-o")
        .arg(log)
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(&format!("127.0.0.1:{listen}"));
    let pid = child.id().to_string();
    Proxy { child, pid }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the file at `path` holds `count` lines containing `text`; panics after 10 s.
fn wait_for_lines(path: &Path, text: &str, count: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = read(path);
        if log.matches(text).count() >= count {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "waited for {count} × {text:?} in {}:\n{log}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still runs (a zombie does not: it has exited).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| !s.trim_start().starts_with('Z'))
    })
}

#[test]
fn every_flag_of_nutcrackers_command_line_is_accepted() {
    let dir = TempDir::new("operator-flags");
    let config = pool_file(dir.path(), free_port());
    let pid = dir.path().join("p.pid");
    let log = dir.path().join("p.log");
    // The flags of nutcracker's usage line, long and short, as an init script passes them (-t first,
    // as Debian's checks the file: nothing is started, detached or written).
    for long in [false, true] {
        let args: Vec<String> = if long {
            vec![
                "--test-conf".into(),
                "--conf-file".into(),
                config.display().to_string(),
                "--stats-port".into(),
                "22299".into(),
                "--stats-addr".into(),
                "127.0.0.1".into(),
                "--daemonize".into(),
                "--pid-file".into(),
                pid.display().to_string(),
                "--output".into(),
                log.display().to_string(),
                "--verbose".into(),
                "11".into(),
                "--stats-interval".into(),
                "30000".into(),
                "--mbuf-size".into(),
                "16384".into(),
            ]
        } else {
            vec![
                "-t".into(),
                "-c".into(),
                config.display().to_string(),
                "-s".into(),
                "22299".into(),
                "-a".into(),
                "127.0.0.1".into(),
                "-d".into(),
                "-p".into(),
                pid.display().to_string(),
                "-o".into(),
                log.display().to_string(),
                "-v".into(),
                "5".into(),
                "-i".into(),
                "30000".into(),
                "-m".into(),
                "16384".into(),
            ]
        };
        shardring()
            .arg("proxy")
            .args(&args)
            .assert()
            .success()
            .stdout(predicate::str::contains("syntax is ok"));
    }
    assert!(!pid.exists() && !log.exists(), "-t starts nothing");
    // nutcracker's levels are 0 to 11.
    shardring()
        .args(["proxy", "-t", "-v", "12", "-c"])
        .arg(&config)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("-v"));
    for flag in ["-D", "--describe-stats"] {
        shardring().args(["proxy", flag]).assert().success().stdout(
            predicate::str::contains("pool stats:")
                .and(predicate::str::contains("server stats:"))
                .and(predicate::str::contains("server_ejected_at")),
        );
    }
    for flag in ["-V", "--version"] {
        shardring()
            .args(["proxy", flag])
            .assert()
            .success()
            .stderr(predicate::str::contains(env!("CARGO_PKG_VERSION")));
    }
    for flag in ["-h", "--help"] {
        shardring().args(["proxy", flag]).assert().success().stdout(
            predicate::str::contains("memcached and Redis sharding proxy")
                .and(predicate::str::contains("--daemonize"))
                .and(predicate::str::contains("--log-format")),
        );
    }
    // Without -c, the file Debian's nutcracker reads (its unit and init script pass no -c).
    let out = shardring().args(["proxy", "-t"]).output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("/etc/nutcracker/nutcracker.yml"), "{said}");
}

#[test]
fn usr1_and_usr2_are_harmless_and_ttin_ttou_change_what_is_logged() {
    let dir = TempDir::new("operator-signals");
    let listen = free_port();
    let config = pool_file(dir.path(), listen);
    let log = dir.path().join("proxy.log");
    // -v 5: nutcracker's default (notice), info here.
    let proxy = start(&config, listen, &log, &["-v", "5"]);
    let pid = proxy.pid.as_str();
    signal("-USR1", pid);
    signal("-USR2", pid);
    let logged = wait_for_lines(&log, "ignored", 2);
    assert!(
        logged.contains("SIGUSR1") && logged.contains("SIGUSR2"),
        "{logged}"
    );
    wait_listening(&format!("127.0.0.1:{listen}"));
    assert!(running(pid), "USR1/USR2 must not end the proxy");

    // One step down (info → warn): the info line of the next USR1 is not written.
    signal("-TTOU", pid);
    wait_for_lines(&log, "to=\"warn\"", 1);
    signal("-USR1", pid);
    // Signals that wait together are taken in any order: this one first.
    std::thread::sleep(Duration::from_millis(500));
    // Two steps up (warn → info → debug): the USR1 and the debug line of the second raise are.
    signal("-TTIN", pid);
    wait_for_lines(&log, "to=\"info\"", 1);
    signal("-TTIN", pid);
    let logged = wait_for_lines(&log, "to=\"debug\"", 1);
    assert!(
        logged.contains("DEBUG"),
        "a raise is logged at the new level: {logged}"
    );
    signal("-USR1", pid);
    let logged = wait_for_lines(&log, "signal=\"SIGUSR1\"", 2);
    assert_eq!(
        logged.matches("signal=\"SIGUSR1\"").count(),
        2,
        "the USR1 sent at warn is not logged: {logged}"
    );
    assert!(running(pid));
    wait_listening(&format!("127.0.0.1:{listen}"));
    signal("-TERM", pid);
    wait_for_lines(&log, "shutting down", 1);
}

#[test]
fn sighup_after_the_log_file_was_moved_writes_a_new_one_and_logs_what_changed() {
    let dir = TempDir::new("operator-hup");
    let listen = free_port();
    let config = pool_file(dir.path(), listen);
    let log = dir.path().join("proxy.log");
    let rotated = dir.path().join("proxy.log.1");
    let proxy = start(&config, listen, &log, &[]);
    wait_for_lines(&log, "serving", 1);
    // logrotate: move the file away, change the config, then send SIGHUP (its postrotate's reload).
    std::fs::rename(&log, &rotated).unwrap();
    std::fs::write(
        &config,
        format!(
            "alpha:\n  listen: 127.0.0.1:{listen}\n  timeout: 400\n  servers:\n   - 127.0.0.1:9:2 cache-a\n   - 127.0.0.1:10:1 cache-b\n"
        ),
    )
    .unwrap();
    signal("-HUP", &proxy.pid);
    let fresh = wait_for_lines(&log, "configuration reloaded", 1);
    assert!(fresh.contains("pool=alpha"), "{fresh}");
    assert!(fresh.contains("servers added [cache-b]"), "{fresh}");
    assert!(
        fresh.contains("servers re-weighted [cache-a 1\u{2192}2]"),
        "{fresh}"
    );
    assert!(fresh.contains("timeout None\u{2192}Some(400ms)"), "{fresh}");
    let old = read(&rotated);
    assert!(old.contains("reopening the log file"), "{old}");
    assert!(!old.contains("configuration reloaded"), "{old}");
    signal("-TERM", &proxy.pid);
    wait_for_lines(&log, "shutting down", 1);
}

#[test]
fn json_logs_are_one_object_a_line() {
    let dir = TempDir::new("operator-json");
    let listen = free_port();
    let config = pool_file(dir.path(), listen);
    let log = dir.path().join("proxy.json");
    let proxy = start(&config, listen, &log, &["--log-format", "json"]);
    signal("-USR1", &proxy.pid);
    signal("-TERM", &proxy.pid);
    wait_for_lines(&log, "shutting down", 1);
    let text = read(&log);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let serving = lines
        .iter()
        .find(|l| l["fields"]["message"] == "serving")
        .expect("a serving line");
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["fields"]["pool"], "alpha");
    assert!(lines.iter().any(|l| l["fields"]["signal"] == "SIGUSR1"));
}

#[test]
fn daemonize_detaches_and_keeps_its_pid_file_until_it_exits() {
    let dir = TempDir::new("operator-daemon");
    let listen = free_port();
    let config = pool_file(dir.path(), listen);
    let pid_file = dir.path().join("proxy.pid");
    let log = dir.path().join("proxy.log");
    // The command returns once detached (the parent exits 0); the daemon goes on.
    shardring()
        .args(["proxy", "-d", "-s", &free_port().to_string(), "-c"])
        .arg(&config)
        .arg("-p")
        .arg(&pid_file)
        .arg("-o")
        .arg(&log)
        .timeout(Duration::from_secs(20))
        .assert()
        .success()
        .stdout("")
        .stderr("");
    wait_listening(&format!("127.0.0.1:{listen}"));
    let pid = read(&pid_file);
    assert!(pid.ends_with('\n'), "{pid:?}");
    let pid = pid.trim().to_owned();
    assert!(running(&pid), "the pid file names the daemon: {pid}");
    // Its own session (setsid), in /, with its log where -o said.
    let stat = read(Path::new(&format!("/proc/{pid}/stat")));
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(fields[3], pid, "session id: {stat}");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        Path::new("/")
    );
    wait_for_lines(&log, "serving", 1);
    signal("-TERM", &pid);
    let deadline = Instant::now() + Duration::from_secs(20);
    while pid_file.exists() || running(&pid) {
        assert!(Instant::now() < deadline, "the daemon did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(read(&log).contains("shutting down"));
}

#[test]
fn a_port_that_cannot_be_bound_is_named_once() {
    let port = free_port().to_string();
    let _taken = std::net::TcpListener::bind(format!("127.0.0.1:{port}")).unwrap();
    let dir = TempDir::new("operator-bind");
    let config = pool_file(dir.path(), free_port());
    shardring()
        .args(["proxy", "-s", &port, "-c"])
        .arg(&config)
        .timeout(Duration::from_secs(20))
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains(format!(
                "shardring: cannot listen on 127.0.0.1:{port} (the stats port"
            ))
            .and(predicate::str::contains("shardring: shardring").not())
            .and(predicate::str::contains("Address already in use")),
        );
}

#[test]
fn more_threads_than_cpus_is_warned_about() {
    let dir = TempDir::new("operator-threads");
    let listen = free_port();
    let config = pool_file(dir.path(), listen);
    let log = dir.path().join("proxy.log");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let proxy = start(
        &config,
        listen,
        &log,
        &["--threads", &(cpus + 1).to_string()],
    );
    wait_for_lines(&log, "more worker threads than CPUs", 1);
    signal("-TERM", &proxy.pid);
    wait_for_lines(&log, "shutting down", 1);
}

/// Scripts and config-management facts read nutcracker's `-V` (`This is nutcracker-0.5.0`, on stderr)
/// with a few patterns; each reads the same nutcracker version from the proxy's line as from a live
/// nutcracker's, and the line does not say the program is nutcracker.
#[test]
fn the_version_line_reads_as_nutcrackers_to_the_patterns_scripts_use() {
    let ours = shardring().args(["proxy", "-V"]).output().unwrap();
    assert!(ours.status.success());
    assert!(
        ours.stdout.is_empty(),
        "nutcracker prints -V on stderr only"
    );
    let ours = String::from_utf8(ours.stderr).unwrap();
    let line = ours.lines().next().unwrap_or_default();
    assert!(line.contains("shardring-proxy-"), "{line}");
    assert!(line.contains(env!("CARGO_PKG_VERSION")), "{line}");
    assert!(!line.ends_with("nutcracker-0.5.0"), "{line}");
    // The patterns: serverspec's `contain('This is nutcracker-0.5.0')`, the regex `This is
    // nutcracker-(\S+)`, the third word, and the first version number in the line (Homebrew's
    // `assert_match version`).
    let readings = |line: &str| {
        let after = line
            .split_once("This is nutcracker-")
            .map(|(_, v)| v.split_whitespace().next().unwrap_or_default().to_owned());
        let third = line.split_whitespace().nth(2).map(str::to_owned);
        let first_version = line
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .find(|w| w.matches('.').count() == 2 && w.split('.').all(|p| !p.is_empty()))
            .map(str::to_owned);
        (
            line.contains("This is nutcracker-0.5.0"),
            after,
            third,
            first_version,
        )
    };
    let expect = (
        true,
        Some("0.5.0".to_owned()),
        Some("nutcracker-0.5.0".to_owned()),
        Some("0.5.0".to_owned()),
    );
    assert_eq!(readings(line), expect, "{line}");
    // The live nutcracker's own line, where it is installed.
    if let Ok(theirs) = std::process::Command::new("nutcracker").arg("-V").output() {
        let theirs = String::from_utf8_lossy(&theirs.stderr).into_owned();
        let first = theirs.lines().next().unwrap_or_default();
        assert_eq!(readings(first), expect, "{first}");
    } else if std::env::var_os("CI").is_some() {
        panic!("nutcracker is not installed");
    }
}
