//! The roster: `shardring migrate` never takes a participant's silence for agreement. A proxy that
//! registered and then went quiet (here paused with SIGSTOP for longer than its lease) blocks every
//! step and is named; it can be taken out only once its lease has lapsed; and when it comes back it
//! registers again and the migration goes through with it.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::migrate_fleet::{participants, Fleet};
use crate::support::{shardring, signal};
use test_support::{free_port, Memcached};

/// A pool file over `servers`, listening on `listen`.
fn yaml(listen: u16, servers: &[&Memcached]) -> String {
    let mut y = format!(
        "alpha:\n  listen: 127.0.0.1:{listen}\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n  servers:\n"
    );
    for s in servers {
        y.push_str(&format!("   - {}:1\n", s.addr));
    }
    y
}

/// Waits (up to 60 s) until `ok` holds of the participants.
fn wait_participants(url: &str, what: &str, ok: impl Fn(&[(String, bool)]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = participants(url);
        if ok(&now) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {now:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn migrate(url: &str, file: &Path, timeout: &str) -> std::process::Output {
    shardring()
        .args([
            "migrate",
            "--etcd",
            url,
            "--pool",
            "alpha",
            "--confirm-timeout",
            timeout,
            "--nice",
            "0",
            "-c",
        ])
        .arg(file)
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap()
}

#[test]
fn a_paused_proxy_blocks_the_migration_is_named_and_registers_again_when_it_resumes() {
    if !test_support::etcd_available() {
        return;
    }
    let etcd = test_support::Etcd::start();
    let url = etcd.url();
    let servers: Vec<Memcached> = (0..4).map(|_| Memcached::start()).collect();
    let now: Vec<&Memcached> = servers.iter().collect();
    let dir = test_support::TempDir::new("migrate-roster");
    let file = |name: &str, servers: &[&Memcached]| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml(free_port(), servers)).unwrap();
        path
    };
    let (now_file, next_file) = (file("now.yml", &now), file("next.yml", &now[..3]));
    let publish = |f: &Path, extra: &[&str]| {
        shardring()
            .args(["members", "--etcd", &url, "--pool", "alpha", "-c"])
            .arg(f)
            .arg("publish")
            .args(extra)
            .assert()
            .success();
    };
    publish(&now_file, &[]);
    let fleet = Fleet::start(|l| yaml(l, &now), &["--etcd", &url]);
    let (paused_port, live_port) = (fleet.listens[1].to_string(), fleet.listens[0].to_string());
    let id_of = |port: &str, list: &[(String, bool)]| {
        list.iter()
            .find(|(id, _)| id.ends_with(&format!(":{port}")))
            .map(|(id, _)| id.clone())
    };
    wait_participants(&url, "both proxies registered", |p| {
        p.len() == 2 && p.iter().all(|(_, live)| *live)
    });
    let list = participants(&url);
    let (paused, live) = (
        id_of(&paused_port, &list).unwrap(),
        id_of(&live_port, &list).unwrap(),
    );

    // Paused for longer than its 10-s lease: absent, but still in the roster.
    let pid = fleet.proxies[1].0.id().to_string();
    signal("-STOP", &pid);
    wait_participants(&url, "the paused proxy's lease lapsed", |p| {
        p.len() == 2 && p.iter().any(|(id, live)| *id == paused && !live)
    });
    publish(&next_file, &["--next"]);
    let out = migrate(&url, &fleet.files[0], "3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "silence is not agreement: {stderr}");
    assert!(
        stderr.contains("1 of 2 participants do not dual-write")
            && stderr.contains(&paused)
            && stderr.contains("not registered (its lease lapsed"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&live),
        "every participant's state: {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("copied"),
        "nothing was copied"
    );

    // A live participant cannot be forgotten, nor any without the operator's word that it is
    // stopped; the absent one can, and is then not waited for.
    let forget = |id: &str, stopped: bool| {
        let mut args = vec!["members", "--etcd", &url, "--pool", "alpha", "forget", id];
        if stopped {
            args.push("--stopped");
        }
        let out = shardring().args(&args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, said) = forget(&live, true);
    assert!(!ok && said.contains("is registered now"), "{said}");
    let (ok, said) = forget(&paused, false);
    assert!(!ok && said.contains("without --stopped"), "{said}");
    assert_eq!(participants(&url).len(), 2);
    let (ok, said) = forget(&paused, true);
    assert!(ok, "{said}");
    assert!(said.contains("it knew no planned change"), "{said}");
    assert_eq!(participants(&url), [(live.clone(), true)]);

    // Resumed: it finds its lease gone, registers again (in the roster too), and the migration
    // waits for it and goes through with both.
    signal("-CONT", &pid);
    wait_participants(&url, "the resumed proxy registered again", |p| {
        p.len() == 2 && p.iter().all(|(_, live)| *live)
    });
    let out = migrate(&url, &fleet.files[0], "30");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("cut over: every participant (2)"),
        "{stdout}"
    );
}
