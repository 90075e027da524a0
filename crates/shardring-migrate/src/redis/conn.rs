//! One connection to a Redis server: TCP or a unix socket, `AUTH` and `SELECT` on connecting, and
//! pipelines (write every command of a batch, then read as many replies) under the job's timeout.
//!
//! Commands are written as RESP arrays of bulk strings; replies are read with `shardring-resp`'s
//! [`ReplyReader`], the reply framer the proxy uses, so a reply arriving in many reads is framed once.
//!
//! Refusals that concern the connection rather than a key (`NOAUTH`, `WRONGPASS`, `NOPERM`) become a
//! [`MigrateError`]: going on would fail every key the same way. Every other error reply is handed to
//! the caller, which decides whether it concerns one key.

use std::io;
use std::time::Duration;

use shardring_resp::{ReplyLimits, ReplyReader, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
        encode(&mut self.buf, args);
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

/// Appends the command `args` to `out` as an array of bulk strings.
fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    header(out, b'*', args.len());
    for a in args {
        let a = a.as_ref();
        header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends `*n\r\n` or `$n\r\n`.
fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The bounds on one reply: the reader's defaults (a bulk string up to Redis's own 512 MiB
/// `proto-max-bulk-len`, so any `DUMP` payload `RESTORE` would take), nested at most 32 deep (the replies
/// read here nest at most 3 deep; a broken or hostile peer must not make us recurse).
fn reply_limits() -> ReplyLimits {
    ReplyLimits {
        max_depth: 32,
        ..ReplyLimits::default()
    }
}

/// A connection to one server.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    /// Bytes read and not parsed yet start at `rbuf[rpos]`.
    rbuf: Vec<u8>,
    rpos: usize,
    /// Reads the reply at `rbuf[rpos..]`, resuming where the last read left it.
    reader: ReplyReader,
    name: String,
    timeout: Duration,
    /// The digest script's SHA-1 once loaded on this connection's server (see `verify`).
    pub(super) script_sha: Option<String>,
    /// Whether the server is a Redis Cluster node (`cluster_enabled:1`): it refuses a command whose
    /// keys are in two slots (`CROSSSLOT`), so a command of many keys goes as one a slot.
    cluster: bool,
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
            reader: ReplyReader::new(reply_limits()),
            name: ep.name.clone(),
            timeout,
            script_sha: None,
            cluster: false,
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
        // A server that does not say (an ACL without INFO, a server too old to have clusters) is
        // taken for a standalone one: a command it refuses then fails as before.
        if let Ok(Value::Bulk(info)) = conn.call(&["INFO", "cluster"]).await {
            conn.cluster = memchr::memmem::find(&info, b"cluster_enabled:1").is_some();
        }
        Ok(conn)
    }

    /// The indexes of `keys` in groups that one command may name together: every key in one group
    /// on a standalone server, one group a hash slot on a cluster node (each group in the order of
    /// its first key).
    pub fn slot_groups(&self, keys: &[&[u8]]) -> Vec<Vec<usize>> {
        if !self.cluster {
            return vec![(0..keys.len()).collect()];
        }
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let slot = shardring_resp::key_slot(k);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, g)) => g.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// Deletes `keys` (`UNLINK`, one a slot on a cluster node, pipelined); how many the server
    /// held.
    ///
    /// # Errors
    /// See [`Conn::run`]; a refused `UNLINK`.
    pub async fn unlink(&mut self, keys: &[&[u8]]) -> Result<u64, MigrateError> {
        if keys.is_empty() {
            return Ok(0);
        }
        let mut p = Pipeline::new();
        for group in self.slot_groups(keys) {
            let mut args: Vec<&[u8]> = Vec::with_capacity(group.len() + 1);
            args.push(b"UNLINK");
            args.extend(group.iter().map(|&i| keys[i]));
            p.cmd(&args);
        }
        let mut held = 0;
        for r in self.run(&p).await? {
            let Some(n) = r.integer() else {
                return Err(self.refused(format!("UNLINK answered {r:?}")));
            };
            held += u64::try_from(n).unwrap_or(0);
        }
        Ok(held)
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
    pub async fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, MigrateError> {
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
    /// A connection failure or timeout, bytes that are not RESP (or a reply over the reader's limits), or
    /// an authentication refusal.
    pub async fn run(&mut self, p: &Pipeline) -> Result<Vec<Value>, MigrateError> {
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

    async fn round_trip(&mut self, p: &Pipeline) -> Result<Vec<Value>, MigrateError> {
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
            match self.reader.read(&self.rbuf[self.rpos..]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &["SET", "k", ""]);
        encode(&mut out, &[b"GET".as_slice(), b"a\r\nb"]);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n"
        );
    }
}
