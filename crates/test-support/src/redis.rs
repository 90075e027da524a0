//! Real redis-server processes for tests, on 127.0.0.1 free ports, killed on drop, and RESP helpers.

use std::process::{Child, Command, Stdio};

use crate::{child_listening, free_port, skip_missing};

/// A redis-server child process, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    /// `127.0.0.1:port`.
    pub addr: String,
    /// The port (kept for [`RedisServer::restart`]).
    pub port: u16,
    child: Option<Child>,
    args: Vec<String>,
}

impl RedisServer {
    /// On a free port (trying five), with `extra` arguments; `None` (the test is skipped) when
    /// redis-server is not installed, except in CI.
    pub fn start(extra: &[&str]) -> Option<RedisServer> {
        for _ in 0..5 {
            let port = free_port();
            match RedisServer::start_on(port, extra) {
                Ok(Some(s)) => return Some(s),
                Ok(None) => continue,
                Err(e) => {
                    skip_missing("redis-server", &e);
                    return None;
                }
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// On `port`; `Ok(None)` when it did not come up there (the port was taken).
    pub fn start_on(port: u16, extra: &[&str]) -> std::io::Result<Option<RedisServer>> {
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let addr = format!("127.0.0.1:{port}");
        if !child_listening(&mut child, &addr) {
            return Ok(None);
        }
        Ok(Some(RedisServer {
            addr,
            port,
            child: Some(child),
            args: extra.iter().map(|s| s.to_string()).collect(),
        }))
    }

    /// Its process id; `None` once killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (its data is gone: nothing is saved).
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

    /// Kills the server and starts it again, empty, on its port with its arguments.
    pub fn restart(&mut self) {
        self.kill();
        let extra: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let again = RedisServer::start_on(self.port, &extra)
            .unwrap()
            .expect("restarts on its port");
        *self = again;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` servers with `extra` arguments; `None` when redis-server is not installed (outside CI).
pub fn redises(n: usize, extra: &[&str]) -> Option<Vec<RedisServer>> {
    (0..n).map(|_| RedisServer::start(extra)).collect()
}

/// A RESP command of `args`, as a client sends it.
pub fn resp(args: &[&str]) -> String {
    let mut s = format!("*{}\r\n", args.len());
    for a in args {
        s += &format!("${}\r\n{a}\r\n", a.len());
    }
    s
}

/// A RESP bulk string.
pub fn bulk(v: &str) -> String {
    format!("${}\r\n{v}\r\n", v.len())
}
