//! One connection to a Redis server: TCP or a unix socket, `AUTH` and `SELECT` on connecting, and
//! pipelines (write every command of a batch, then read as many replies) under the job's timeout.
//!
//! Refusals that concern the connection rather than a key (`NOAUTH`, `WRONGPASS`, `NOPERM`) become a
//! [`MigrateError`]: going on would fail every key the same way. Every other error reply is handed to
//! the caller, which decides whether it concerns one key.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::resp::{self, Reply};
use crate::dial::{dial, Stream};
use crate::{Endpoint, MigrateError};

/// Commands to send in one round trip.
#[derive(Debug, Default)]
pub struct Pipeline {
    buf: Vec<u8>,
    count: usize,
}

impl Pipeline {
    /// An empty pipeline.
    pub fn new() -> Pipeline {
        Pipeline::default()
    }

    /// Adds the command `args`.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> &mut Pipeline {
        resp::encode(&mut self.buf, args);
        self.count += 1;
        self
    }

    /// How many commands it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// A connection to one server.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    /// Bytes read and not parsed yet start at `rbuf[rpos]`.
    rbuf: Vec<u8>,
    rpos: usize,
    name: String,
    timeout: Duration,
    /// The digest script's SHA-1 once loaded on this connection's server (see `verify`).
    pub(super) script_sha: Option<String>,
}

impl Conn {
    /// Connects to `ep` (its `addr` a `host:port` or a unix socket's path), then sends `AUTH` when it
    /// has a password and `SELECT` when its database is not 0. Every round trip (the connect too)
    /// may take `timeout`.
    ///
    /// # Errors
    /// When the server cannot be reached, refuses the password or the database.
    pub async fn connect(ep: &Endpoint, timeout: Duration) -> Result<Conn, MigrateError> {
        let stream = dial(ep, timeout).await?;
        let mut conn = Conn {
            stream,
            rbuf: Vec::with_capacity(64 * 1024),
            rpos: 0,
            name: ep.name.clone(),
            timeout,
            script_sha: None,
        };
        if let Some(password) = &ep.auth {
            let r = conn.call(&["AUTH", password.as_str()]).await?;
            if let Some(e) = r.error() {
                return Err(conn.refused(format!("AUTH refused: {e}")));
            }
        }
        if ep.db != 0 {
            let r = conn.call(&["SELECT", &ep.db.to_string()]).await?;
            if let Some(e) = r.error() {
                return Err(conn.refused(format!("SELECT {} refused: {e}", ep.db)));
            }
        }
        Ok(conn)
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A protocol error naming this server.
    pub fn refused(&self, reason: impl Into<String>) -> MigrateError {
        MigrateError::Protocol {
            server: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Sends one command and reads its reply.
    ///
    /// # Errors
    /// See [`Conn::run`].
    pub async fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, MigrateError> {
        let mut p = Pipeline::new();
        p.cmd(args);
        let mut replies = self.run(&p).await?;
        replies
            .pop()
            .ok_or_else(|| self.refused("no reply to a command"))
    }

    /// Sends every command of `p` and reads their replies, in order, within the timeout.
    ///
    /// # Errors
    /// A connection failure or timeout, bytes that are not RESP2, or an authentication refusal.
    pub async fn run(&mut self, p: &Pipeline) -> Result<Vec<Reply>, MigrateError> {
        let timeout = self.timeout;
        let replies = match tokio::time::timeout(timeout, self.round_trip(p)).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(MigrateError::Timeout {
                    server: self.name.clone(),
                    timeout,
                })
            }
        };
        for r in &replies {
            if let Some(e) = r.error() {
                if ["NOAUTH", "WRONGPASS", "NOPERM"]
                    .iter()
                    .any(|p| e.starts_with(p))
                {
                    return Err(self.refused(e.to_string()));
                }
            }
        }
        Ok(replies)
    }

    async fn round_trip(&mut self, p: &Pipeline) -> Result<Vec<Reply>, MigrateError> {
        let name = &self.name;
        let io_err = |source| MigrateError::Io {
            server: name.clone(),
            source,
        };
        // Write everything, then read: Redis keeps reading while its replies queue up in its output
        // buffer, so a batch's pipeline cannot deadlock.
        self.stream.write_all(&p.buf).await.map_err(io_err)?;
        self.stream.flush().await.map_err(io_err)?;
        let mut replies = Vec::with_capacity(p.count);
        while replies.len() < p.count {
            match resp::parse(&self.rbuf[self.rpos..]) {
                Ok(Some((r, used))) => {
                    self.rpos += used;
                    replies.push(r);
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(MigrateError::Protocol {
                        server: name.clone(),
                        reason: e.to_string(),
                    })
                }
            }
            if self.rpos > 0 {
                self.rbuf.drain(..self.rpos);
                self.rpos = 0;
            }
            self.rbuf.reserve(64 * 1024);
            let n = self.stream.read_buf(&mut self.rbuf).await.map_err(io_err)?;
            if n == 0 {
                return Err(io_err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
        }
        if self.rpos == self.rbuf.len() {
            self.rbuf.clear();
            self.rpos = 0;
        }
        Ok(replies)
    }
}
