//! A live nutcracker (twemproxy) on a config the test writes, for drop-in comparisons with the proxy.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, skip_missing, TempDir};

/// A nutcracker child process, killed on drop; its config and log live in a directory removed after it.
#[derive(Debug)]
pub struct Nutcracker {
    /// The address it serves clients on (the config's `listen:`).
    pub addr: String,
    child: Child,
    _dir: TempDir,
}

impl Nutcracker {
    /// Runs nutcracker on the twemproxy YAML `config`, whose pool listens on `listen`, with its stats on
    /// a free port, and waits until `listen` accepts. `None` (the test is skipped) when nutcracker is not
    /// installed, except in CI.
    pub fn start(config: &str, listen: &str) -> Option<Nutcracker> {
        let dir = TempDir::new("nc");
        let conf = dir.path().join("nutcracker.yml");
        std::fs::write(&conf, config).expect("nutcracker.yml written");
        let mut child = match Command::new("nutcracker")
            .arg("-c")
            .arg(&conf)
            .args(["-s", &free_port().to_string(), "-a", "127.0.0.1", "-o"])
            .arg(dir.path().join("nutcracker.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                skip_missing("nutcracker", &e);
                return None;
            }
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(listen).is_err() {
            if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
                let _ = child.kill();
                let _ = child.wait();
                panic!("nutcracker did not start on {listen}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Nutcracker {
            addr: listen.to_owned(),
            child,
            _dir: dir,
        })
    }
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
