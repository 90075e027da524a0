//! Real memcached servers on 127.0.0.1 free ports (or unix sockets), killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{child_listening, free_port};

/// A memcached child process, killed on drop.
#[derive(Debug)]
pub struct Memcached {
    /// `127.0.0.1:port`, or the socket's path for [`Memcached::start_unix`].
    pub addr: String,
    /// The port (kept to restart on the same one); 0 for a unix socket.
    pub port: u16,
    child: Option<Child>,
}

impl Memcached {
    /// A memcached on a free port; tries another port if another process took the first meanwhile.
    pub fn start() -> Memcached {
        Memcached::start_with(&[])
    }

    /// [`Memcached::start`] with extra memcached options (`-I 2m`).
    pub fn start_with(options: &[&str]) -> Memcached {
        for _ in 0..5 {
            if let Some(m) = Memcached::try_start_on(free_port(), options) {
                return m;
            }
        }
        panic!("memcached did not start on any of 5 free ports");
    }

    /// A memcached on `port` (a restart on the port a killed one had).
    pub fn start_on(port: u16) -> Memcached {
        Memcached::try_start_on(port, &[])
            .unwrap_or_else(|| panic!("memcached did not start on port {port}"))
    }

    fn try_start_on(port: u16, options: &[&str]) -> Option<Memcached> {
        let mut child = Command::new("memcached")
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-m",
                "64",
                "-t",
                "1",
                "-u",
                "root",
            ])
            .args(options)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("memcached is installed (apt-get install memcached)");
        let addr = format!("127.0.0.1:{port}");
        child_listening(&mut child, &addr).then_some(Memcached {
            addr,
            port,
            child: Some(child),
        })
    }

    /// A memcached listening on a unix socket only (`addr` is the socket's path, removed on drop).
    pub fn start_unix() -> Memcached {
        let path = std::env::temp_dir().join(format!(
            "shardring-mc-{}-{}.sock",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_file(&path);
        let mut child = Command::new("memcached")
            .arg("-s")
            .arg(&path)
            .args(["-m", "64", "-t", "1", "-u", "root"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("memcached is installed (apt-get install memcached)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&path).is_err() {
            assert!(
                child.try_wait().ok().flatten().is_none() && Instant::now() < deadline,
                "memcached did not start on {}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Memcached {
            addr: path.display().to_string(),
            port: 0,
            child: Some(child),
        }
    }

    /// Kills the server (the port is kept for a restart).
    pub fn kill(&mut self) {
        crate::stop(&mut self.child);
    }

    /// Pauses the server (SIGSTOP): connections stay open and nothing is answered, as a stalled
    /// server behaves.
    pub fn pause(&self) {
        crate::signal(&self.child, "-STOP");
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) {
        crate::signal(&self.child, "-CONT");
    }

    /// The server as a twemproxy config names it: `addr:1` (weight 1).
    pub fn server_spec(&self) -> String {
        format!("{}:1", self.addr)
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
        if self.addr.starts_with('/') {
            let _ = std::fs::remove_file(&self.addr);
        }
    }
}

/// `n` memcached servers.
pub fn memcacheds(n: usize) -> Vec<Memcached> {
    (0..n).map(|_| Memcached::start()).collect()
}
