//! A real etcd on free 127.0.0.1 ports with a temporary data directory, killed and removed on drop
//! (a [`Relay`](crate::Relay) in front of it makes it unreachable for some clients only).
//!
//! Tests that need etcd call [`etcd_available`] first: without the `etcd` binary they are skipped with a
//! loud message, unless the `CI` environment variable is set, in which case they fail.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// Whether `etcd` can be run. Prints a loud skip message when not; panics when not and `CI` is set.
pub fn etcd_available() -> bool {
    let found = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "etcd is not installed but CI is set: the etcd tests must run (apt-get install etcd-server)"
        );
        eprintln!(
            "\n!!!!!!!! SKIPPED: etcd is not installed (apt-get install etcd-server); \
             the etcd membership tests did not run !!!!!!!!\n"
        );
    }
    found
}

/// An etcd child process.
#[derive(Debug)]
pub struct Etcd {
    /// The running server, if it is running.
    child: Option<Child>,
    /// Its data directory, removed on drop.
    dir: PathBuf,
    /// Its client port.
    pub client_port: u16,
    /// Its peer port.
    peer_port: u16,
}

impl Etcd {
    /// Starts etcd on free ports with a fresh data directory and waits until it answers.
    pub fn start() -> Etcd {
        let dir = std::env::temp_dir().join(format!(
            "shardring-etcd-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("a temp data dir");
        // etcd (3.4.10 and later) wants its data dir private.
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        }
        let mut etcd = Etcd {
            child: None,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
        };
        etcd.restart();
        etcd
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Kills the server (SIGKILL), keeping its data.
    pub fn kill(&mut self) {
        crate::stop(&mut self.child);
    }

    /// Starts the server again on the same ports and data, and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let client = self.url();
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(&self.dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("t={peer}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts (apt-get install etcd-server)");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        let health = format!("127.0.0.1:{}", self.client_port);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("etcd exited at start: {status}");
                }
            }
            // Ready once /health answers true over plain HTTP on the client port.
            if let Ok(mut s) = std::net::TcpStream::connect(&health) {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let _ = s.write_all(b"GET /health HTTP/1.0\r\n\r\n");
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                if out.contains("\"health\":\"true\"") {
                    // Only ours if it still runs: an etcd whose port was taken exits at once.
                    if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                        panic!(
                            "etcd exited at start ({status}); something else answers on {health}"
                        );
                    }
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("etcd did not become healthy within 15 s");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
