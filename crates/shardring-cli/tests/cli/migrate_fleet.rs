//! The migration tests' fleet: two `shardring proxy` processes with their own files and a shared
//! `--next-config` file, and `shardring migrate` run over them as an operator runs it.

use std::path::PathBuf;
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use crate::support::{shardring, Kill};
use test_support::{free_port, wait_listening, TempDir};

/// Two proxies with their own files and a shared next file.
pub struct Fleet {
    pub dir: TempDir,
    pub files: Vec<PathBuf>,
    pub next: PathBuf,
    pub listens: Vec<u16>,
    pub stats: Vec<u16>,
    pub proxies: Vec<Kill>,
    /// When set, `migrate`'s reload command signals the proxies one at a time this far apart:
    /// each cut-over and drop then has a window in which they serve different memberships.
    pub reload_gap: Option<Duration>,
}

impl Fleet {
    /// Two proxies over the pool `yaml` writes for a listen port, their next file equal to it (no
    /// planned change yet), started with `flags`.
    pub fn start(yaml: impl Fn(u16) -> String, flags: &[&str]) -> Fleet {
        let dir = TempDir::new("migrate");
        let (mut files, mut listens, mut stats, mut proxies) = (vec![], vec![], vec![], vec![]);
        let next = dir.path().join("next.yml");
        std::fs::write(&next, yaml(free_port())).unwrap();
        for p in 0..2 {
            let listen = free_port();
            let file = dir.path().join(format!("proxy{p}.yml"));
            std::fs::write(&file, yaml(listen)).unwrap();
            let stat = free_port();
            let child = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"))
                .args(["proxy", "-s", &stat.to_string(), "-c"])
                .arg(&file)
                // With etcd the next membership is etcd's.
                .args(if flags.contains(&"--etcd") {
                    vec![]
                } else {
                    vec![std::ffi::OsStr::new("--next-config"), next.as_os_str()]
                })
                .arg("-o")
                .arg(dir.path().join(format!("proxy{p}.log")))
                .args(flags)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            proxies.push(Kill(child));
            wait_listening(&format!("127.0.0.1:{listen}"));
            wait_listening(&format!("127.0.0.1:{stat}"));
            files.push(file);
            listens.push(listen);
            stats.push(stat);
        }
        Fleet {
            dir,
            files,
            next,
            listens,
            stats,
            proxies,
            reload_gap: None,
        }
    }

    pub fn addr(&self, p: usize) -> String {
        format!("127.0.0.1:{}", self.listens[p])
    }

    pub fn pids(&self) -> String {
        self.proxies
            .iter()
            .map(|k| k.0.id().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The command that makes every proxy reload its files ([`Fleet::reload_gap`]).
    pub fn reload_command(&self) -> String {
        match self.reload_gap {
            None => format!("kill -HUP {}", self.pids()),
            Some(gap) => self
                .proxies
                .iter()
                .map(|k| format!("kill -HUP {}", k.0.id()))
                .collect::<Vec<_>>()
                .join(&format!("; sleep {}; ", gap.as_secs_f64())),
        }
    }

    pub fn stats_list(&self) -> String {
        self.stats
            .iter()
            .map(|s| format!("127.0.0.1:{s}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Plans the change to the pool `next` (a whole file): the next file rewritten and the
    /// proxies reloaded (they dual-write from then on).
    pub fn plan(&self, next: &str) {
        std::fs::write(&self.next, next).unwrap();
        for k in &self.proxies {
            crate::support::signal("-HUP", &k.0.id().to_string());
        }
    }

    /// `shardring migrate` for this fleet, with `extra` flags.
    pub fn migrate(&self, extra: &[&str]) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::from_std(self.migrate_command(extra));
        cmd.timeout(Duration::from_secs(300));
        cmd
    }

    /// [`Fleet::migrate`] as a plain command (to read its output as it runs).
    pub fn migrate_command(&self, extra: &[&str]) -> StdCommand {
        let mut cmd = StdCommand::new(assert_cmd::cargo::cargo_bin("shardring"));
        cmd.arg("migrate");
        for f in &self.files {
            cmd.arg("-c").arg(f);
        }
        cmd.arg("--to").arg(&self.next).args([
            "--pool",
            "alpha",
            "--proxies",
            &self.stats_list(),
            "--reload-command",
            &self.reload_command(),
            "--confirm-timeout",
            "20",
            // At the CPU priority the tests run at: the default idle class waits for idle CPU,
            // which a test machine running suites side by side may not have for minutes.
            "--nice",
            "0",
        ]);
        cmd.args(extra);
        cmd
    }
}

/// A load thread: what it expects of the keys it changed, and the reads that missed.
pub type Load<K, V> = std::thread::JoinHandle<(std::collections::HashMap<K, V>, Vec<String>)>;

/// Joins the load threads: what each expects of the keys it changed, merged, once it is checked
/// that none of their reads missed.
pub fn join_loads<K: std::hash::Hash + Eq, V>(
    loads: Vec<Load<K, V>>,
) -> std::collections::HashMap<K, V> {
    let mut expected = std::collections::HashMap::new();
    for l in loads {
        let (e, misses) = l.join().unwrap();
        assert!(
            misses.is_empty(),
            "{} reads missed, e.g. {:?}",
            misses.len(),
            &misses[..misses.len().min(5)]
        );
        expected.extend(e);
    }
    expected
}

/// `shardring members participants` of pool `alpha` in etcd at `url`: (id, live?) per line.
pub fn participants(url: &str) -> Vec<(String, bool)> {
    let out = shardring()
        .args(["members", "--etcd", url, "--pool", "alpha", "participants"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            let id = f.next().unwrap_or_default().to_owned();
            (id, f.next() == Some("live"))
        })
        .collect()
}
