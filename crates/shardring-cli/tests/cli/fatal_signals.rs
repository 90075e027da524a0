//! `shardring proxy` killed by a fatal signal: the log (`-o`, after a logrotate's move and SIGHUP
//! too) gets a line naming the signal, in nutcracker's words (`signal 11 (SIGSEGV) received, core
//! dumping`) and the log's own form (text or JSON), and the process dies of that very signal.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::signal;
use test_support::{free_port, wait_listening, TempDir};

/// SIGSEGV's and SIGABRT's numbers (Linux's, as nutcracker prints them).
const SIGSEGV: i32 = 11;
const SIGABRT: i32 = 6;

/// A child process, killed and reaped on drop if it still runs.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    /// Waits for the process to exit (20 s at most).
    fn exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the process did not die");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `program args`, run through a shell that sets the core size limit to 0 first and then execs it
/// (same pid): the crashes here are on purpose and must leave no core file behind.
fn without_core(program: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -c 0; exec \"$0\" \"$@\"")
        .arg(program)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Starts `shardring proxy` on a one-pool file in `dir`, logging to `log` with `flags`; returns once
/// it serves.
fn start_proxy(dir: &Path, log: &Path, flags: &[&str]) -> Running {
    let listen = free_port();
    let config = dir.join("nutcracker.yml");
    std::fs::write(
        &config,
        format!("alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:9:1 cache-a\n"),
    )
    .unwrap();
    let child = without_core(&assert_cmd::cargo::cargo_bin("shardring"))
        .args(["proxy", "-s", &free_port().to_string(), "-c"])
        .arg(&config)
        .arg("-o")
        .arg(log)
        .args(flags)
        .spawn()
        .unwrap();
    let proxy = Running(child);
    wait_listening(&format!("127.0.0.1:{listen}"));
    proxy
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the file at `path` holds `text`; panics after 20 s.
fn wait_for(path: &Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !read(path).contains(text) {
        assert!(
            Instant::now() < deadline,
            "waited for {text:?} in {}:\n{}",
            path.display(),
            read(path)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The line of `log` that holds `text`.
fn line_with<'a>(log: &'a str, text: &str) -> &'a str {
    log.lines()
        .find(|l| l.contains(text))
        .unwrap_or_else(|| panic!("no line with {text:?} in:\n{log}"))
}

/// Whether `s` is a timestamp as the log writes them: `2026-12-05T12:25:18.907878Z`.
fn is_timestamp(s: &str) -> bool {
    let shape = "dddd-dd-ddTdd:dd:dd.ddddddZ";
    s.len() == shape.len()
        && s.chars().zip(shape.chars()).all(|(c, want)| match want {
            'd' => c.is_ascii_digit(),
            _ => c == want,
        })
}

#[test]
fn sigsegv_is_logged_in_the_reopened_log_and_kills_with_sigsegv() {
    let dir = TempDir::new("fatal-segv");
    let log = dir.path().join("proxy.log");
    let rotated = dir.path().join("proxy.log.1");
    let mut proxy = start_proxy(dir.path(), &log, &[]);
    wait_for(&log, "serving");
    // logrotate first: the line must land in the file the log was reopened at.
    std::fs::rename(&log, &rotated).unwrap();
    let pid = proxy.0.id().to_string();
    signal("-HUP", &pid);
    wait_for(&log, "configuration reloaded");
    signal("-SEGV", &pid);
    let status = proxy.exit();
    assert_eq!(status.signal(), Some(SIGSEGV), "{status:?}");

    let text = read(&log);
    let line = line_with(&text, "received, core dumping");
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(is_timestamp(time), "{line}");
    assert_eq!(
        rest,
        "ERROR shardring::fatal: signal 11 (SIGSEGV) received, core dumping signal=\"SIGSEGV\"",
    );
    assert!(text.ends_with('\n'), "{text:?}");
    assert!(!read(&rotated).contains("SIGSEGV"), "{}", read(&rotated));
}

#[test]
fn sigabrt_is_logged_as_json_and_kills_with_sigabrt() {
    let dir = TempDir::new("fatal-abrt");
    let log = dir.path().join("proxy.json");
    let mut proxy = start_proxy(dir.path(), &log, &["--log-format", "json"]);
    wait_for(&log, "serving");
    signal("-ABRT", &proxy.0.id().to_string());
    let status = proxy.exit();
    assert_eq!(status.signal(), Some(SIGABRT), "{status:?}");

    // Every line still a JSON object, the last one the signal's.
    let text = read(&log);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let last = lines.last().unwrap();
    assert!(is_timestamp(last["timestamp"].as_str().unwrap()), "{last}");
    assert_eq!(last["level"], "ERROR");
    assert_eq!(last["target"], "shardring::fatal");
    assert_eq!(
        last["fields"]["message"],
        "signal 6 (SIGABRT) received, core dumping"
    );
    assert_eq!(last["fields"]["signal"], "SIGABRT");
}

#[test]
fn the_line_says_what_nutcrackers_says() {
    let dir = TempDir::new("fatal-nutcracker");
    let listen = free_port();
    let config = dir.path().join("nutcracker.yml");
    std::fs::write(
        &config,
        format!("alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:9:1 cache-a\n"),
    )
    .unwrap();
    let log = dir.path().join("nutcracker.log");
    let Some(nutcracker) = find_nutcracker() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "nutcracker must be installed in CI"
        );
        eprintln!("skipping: nutcracker is not installed");
        return;
    };
    let mut nutcracker = Running(
        without_core(&nutcracker)
            .args(["-c"])
            .arg(&config)
            .args(["-s", &free_port().to_string(), "-a", "127.0.0.1", "-o"])
            .arg(&log)
            .spawn()
            .unwrap(),
    );
    wait_listening(&format!("127.0.0.1:{listen}"));
    signal("-SEGV", &nutcracker.0.id().to_string());
    let status = nutcracker.exit();
    assert_eq!(status.signal(), Some(SIGSEGV), "{status:?}");
    let text = read(&log);
    // `[.......................] signal 11 (SIGSEGV) received, core dumping` (nutcracker's
    // async-signal-safe logger has no clock).
    let theirs = line_with(&text, "received").split_once("] ").unwrap().1;
    assert_eq!(theirs, "signal 11 (SIGSEGV) received, core dumping");

    let ours_log = dir.path().join("proxy.log");
    let mut proxy = start_proxy(dir.path(), &ours_log, &[]);
    wait_for(&ours_log, "serving");
    signal("-SEGV", &proxy.0.id().to_string());
    assert_eq!(proxy.exit().signal(), Some(SIGSEGV));
    let ours = read(&ours_log);
    assert!(
        line_with(&ours, "received").contains(&format!("shardring::fatal: {theirs} ")),
        "{ours}"
    );
}

/// nutcracker's path: on PATH, or where Debian installs it.
fn find_nutcracker() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([std::path::PathBuf::from("/usr/sbin")])
        .map(|d| d.join("nutcracker"))
        .find(|p| p.is_file())
}
