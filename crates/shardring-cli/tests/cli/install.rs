//! The README's install step, `cargo install --locked --path crates/shardring-cli`, into a temporary
//! root, and the installed binary started as a proxy.
//!
//! To keep CI short it installs a debug build (`--debug`, which compiles what a release build would,
//! without the optimiser's minutes) from the crates already downloaded (`--offline`), in a target
//! directory of its own under the workspace's `target/` (kept between runs, so a second run only
//! links; the test run's own target directory is locked by the `cargo test` running this).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use test_support::{free_port, wait_listening, TempDir};

#[test]
fn cargo_install_puts_a_shardring_that_serves() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = TempDir::new("install");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "install",
            "--locked",
            "--offline",
            "--debug",
            "--quiet",
            "--path",
        ])
        .arg(workspace.join("crates/shardring-cli"))
        .arg("--root")
        .arg(root.path())
        .arg("--target-dir")
        .arg(workspace.join("target/install-test"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = root.path().join("bin/shardring");
    let version = Command::new(&bin).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("shardring {}\n", env!("CARGO_PKG_VERSION"))
    );

    let listen = free_port();
    let stats = free_port();
    let config = root.path().join("nutcracker.yml");
    std::fs::write(
        &config,
        format!("alpha:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:9:1\n"),
    )
    .unwrap();
    let mut proxy = Command::new(&bin)
        .args(["proxy", "-s", &stats.to_string(), "-c"])
        .arg(&config)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(&format!("127.0.0.1:{listen}"));
    let mut json = String::new();
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{stats}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Read::read_to_string(&mut s, &mut json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["service"], "nutcracker");
    assert!(v["alpha"].is_object(), "{json}");
    let _ = Command::new("kill")
        .args(["-TERM", &proxy.id().to_string()])
        .status();
    assert!(proxy.wait().unwrap().success());
}
