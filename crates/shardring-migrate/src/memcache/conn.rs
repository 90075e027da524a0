//! One connection to a memcached server: TCP or a unix socket, a read buffer of our own, and the
//! pipelined round trip every step of the copy is made of.
//!
//! A round trip writes the whole batch and reads its replies *at the same time*: a batch of large
//! values can hold more reply bytes than the socket buffers, and memcached stops reading a client
//! that does not read its replies, so writing everything before reading would deadlock.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::dial::{dial, Stream};
use crate::{Endpoint, MigrateError};

/// The longest reply or metadump line accepted (memcached's are well under 2 KiB: a key of at most
/// 250 bytes, URL-encoded, and a few numbers); a longer one means the stream is not what we think.
const MAX_LINE: usize = 64 * 1024;

/// How much the read buffer asks the socket for at once.
const READ_CHUNK: usize = 64 * 1024;

/// The end of a pipelined batch: memcached answers `mn` with `MN` after every reply before it, so a
/// batch is read until `MN` and a reply too many or too few is seen as a desynchronised stream.
const NOOP: &[u8] = b"mn\r\n";

/// One meta reply: its status line (without `\r\n`) and, for `VA`, its value.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// `VA 5 f0 t-1 c3`, `HD c3`, `EN`, `NS`, `SERVER_ERROR out of memory`…
    pub line: Bytes,
    /// The value of a `VA` reply.
    pub value: Option<Bytes>,
}

impl Reply {
    /// The status code: the first token (`VA`, `HD`, `EN`, `NS`, `EX`, `NF`, `SERVER_ERROR`…).
    pub fn status(&self) -> &[u8] {
        self.line.split(|&b| b == b' ').next().unwrap_or_default()
    }

    /// The meta flag `letter`'s value as a number (`c` of `HD c42` is 42); `None` when absent or not
    /// a number of that type. The `VA` length token is all digits, so it never matches a letter.
    pub fn flag<T: std::str::FromStr>(&self, letter: u8) -> Option<T> {
        self.line
            .split(|&b| b == b' ')
            .skip(1)
            .find(|t| t.first() == Some(&letter))
            .and_then(|t| std::str::from_utf8(&t[1..]).ok())
            .and_then(|s| s.parse().ok())
    }

    /// The line as text, for messages.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.line).into_owned()
    }
}

/// The reading side: the socket and what was read from it but not consumed yet.
struct Input<R = tokio::io::ReadHalf<Stream>> {
    reader: R,
    buf: BytesMut,
}

impl<R: tokio::io::AsyncRead + Unpin> Input<R> {
    /// Reads more bytes into the buffer; the end of the stream is an error (a server never closes a
    /// connection it still owes replies on).
    async fn fill(&mut self) -> io::Result<()> {
        self.buf.reserve(READ_CHUNK);
        if self.reader.read_buf(&mut self.buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by the server",
            ));
        }
        Ok(())
    }

    /// The next line, without its `\n` or `\r\n` (metadump lines end in a bare `\n`).
    async fn line(&mut self) -> io::Result<Bytes> {
        let mut searched = 0;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[searched..]) {
                let end = searched + i;
                let mut line = self.buf.split_to(end + 1);
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                return Ok(line.freeze());
            }
            searched = self.buf.len();
            if searched > MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a reply line longer than 64 KiB",
                ));
            }
            self.fill().await?;
        }
    }

    /// A value of `n` bytes and the `\r\n` after it.
    async fn data(&mut self, n: usize) -> io::Result<Bytes> {
        let want = n
            .checked_add(2)
            .ok_or_else(|| bad("a value length too large"))?;
        while self.buf.len() < want {
            self.fill().await?;
        }
        let value = self.buf.split_to(n).freeze();
        if &self.buf[..2] != b"\r\n" {
            return Err(bad("a value not followed by \\r\\n"));
        }
        let _ = self.buf.split_to(2);
        Ok(value)
    }

    /// Meta replies up to the batch's `MN`.
    async fn replies(&mut self, expected: usize) -> io::Result<Vec<Reply>> {
        let mut replies = Vec::with_capacity(expected);
        loop {
            let line = self.line().await?;
            if &line[..] == b"MN" {
                return Ok(replies);
            }
            let value = if line.starts_with(b"VA ") {
                let len = line
                    .split(|&b| b == b' ')
                    .nth(1)
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .and_then(|t| t.parse::<usize>().ok())
                    .ok_or_else(|| bad("a VA reply without a length"))?;
                Some(self.data(len).await?)
            } else {
                None
            };
            replies.push(Reply { line, value });
            if replies.len() > expected {
                return Err(bad("more replies than requests"));
            }
        }
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A connection to one server, with the job's timeout on every round trip.
pub(crate) struct Conn {
    /// The server's name, for errors.
    name: String,
    timeout: Duration,
    input: Input,
    writer: tokio::io::WriteHalf<Stream>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("server", &self.name).finish()
    }
}

impl Conn {
    /// Connects to `ep` (a unix socket when its address starts with `/`), within `timeout`.
    pub async fn connect(ep: &Endpoint, timeout: Duration) -> Result<Conn, MigrateError> {
        let (reader, writer) = tokio::io::split(dial(ep, timeout).await?);
        Ok(Conn {
            name: ep.name.clone(),
            timeout,
            input: Input {
                reader,
                buf: BytesMut::with_capacity(READ_CHUNK),
            },
            writer,
        })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn fail(&self, e: Option<io::Error>) -> MigrateError {
        match e {
            None => MigrateError::Timeout {
                server: self.name.clone(),
                timeout: self.timeout,
            },
            Some(e) if e.kind() == io::ErrorKind::InvalidData => MigrateError::Protocol {
                server: self.name.clone(),
                reason: e.to_string(),
            },
            Some(source) => MigrateError::Io {
                server: self.name.clone(),
                source,
            },
        }
    }

    /// One pipelined round trip: writes `req` (whole meta commands, `expected` of them, each
    /// answered by exactly one reply) with `mn` appended, in one write, and reads the replies up to
    /// `MN`, both at once.
    pub async fn exchange(
        &mut self,
        req: &mut Vec<u8>,
        expected: usize,
    ) -> Result<Vec<Reply>, MigrateError> {
        if expected == 0 {
            return Ok(Vec::new());
        }
        req.extend_from_slice(NOOP);
        let req = &req[..];
        let Conn { input, writer, .. } = self;
        let write = async {
            writer.write_all(req).await?;
            writer.flush().await
        };
        let round = async { tokio::try_join!(write, input.replies(expected)) };
        let replies = match tokio::time::timeout(self.timeout, round).await {
            Err(_) => return Err(self.fail(None)),
            Ok(Err(e)) => return Err(self.fail(Some(e))),
            Ok(Ok(((), replies))) => replies,
        };
        if replies.len() != expected {
            return Err(MigrateError::Protocol {
                server: self.name.clone(),
                reason: format!(
                    "{} replies to {expected} requests: the stream is out of step",
                    replies.len()
                ),
            });
        }
        Ok(replies)
    }

    /// Writes a command whose answer is read line by line ([`Conn::read_line`]).
    pub async fn send(&mut self, req: &[u8]) -> Result<(), MigrateError> {
        let write = async {
            self.writer.write_all(req).await?;
            self.writer.flush().await
        };
        match tokio::time::timeout(self.timeout, write).await {
            Err(_) => Err(self.fail(None)),
            Ok(Err(e)) => Err(self.fail(Some(e))),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// The server's clock, a unix time in seconds (`STAT time` of `stats`): the clock its `t` of
    /// `mg` counts from. Seconds left read from a server plus its own clock give the item's expiry
    /// exactly; plus ours, they are off by however late the server's once-a-second tick runs (seconds
    /// on a loaded machine). `None` when the server's stats have no `time`.
    ///
    /// # Errors
    /// When the server fails, times out or answers out of protocol.
    pub async fn clock(&mut self) -> Result<Option<i64>, MigrateError> {
        self.send(b"stats\r\n").await?;
        let mut time = None;
        loop {
            let line = self.read_line().await?;
            if &line[..] == b"END" {
                return Ok(time);
            }
            match line.strip_prefix(b"STAT time ") {
                Some(t) => time = std::str::from_utf8(t).ok().and_then(|t| t.parse().ok()),
                None if line.starts_with(b"STAT ") => {}
                None => {
                    return Err(MigrateError::Protocol {
                        server: self.name.clone(),
                        reason: format!("stats answered {:?}", String::from_utf8_lossy(&line)),
                    })
                }
            }
        }
    }

    /// The next line of an answer (without its line end), within the timeout.
    pub async fn read_line(&mut self) -> Result<Bytes, MigrateError> {
        match tokio::time::timeout(self.timeout, self.input.line()).await {
            Err(_) => Err(self.fail(None)),
            Ok(Err(e)) => Err(self.fail(Some(e))),
            Ok(Ok(line)) => Ok(line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(bytes: &'static [u8]) -> Input<&'static [u8]> {
        Input {
            reader: bytes,
            buf: BytesMut::new(),
        }
    }

    #[tokio::test]
    async fn replies_with_values_and_bare_newline_lines() {
        let mut i = input(b"VA 3 f5 t-1 c9\r\nabc\r\nEN\r\nHD c18446744073709551615\r\nMN\r\nkey=a exp=-1\nEND\r\n");
        let r = i.replies(3).await.unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].status(), b"VA");
        assert_eq!(r[0].value.as_deref(), Some(&b"abc"[..]));
        assert_eq!(r[0].flag(b'f'), Some(5u32));
        assert_eq!(r[0].flag(b't'), Some(-1i64));
        assert_eq!(r[0].flag::<u64>(b'c'), Some(9));
        assert_eq!(r[0].flag::<u64>(b't'), None, "not a u64");
        assert_eq!(r[1].status(), b"EN");
        assert_eq!(r[2].flag(b'c'), Some(u64::MAX));
        assert_eq!(&i.line().await.unwrap()[..], b"key=a exp=-1");
        assert_eq!(&i.line().await.unwrap()[..], b"END");
        assert!(i.line().await.is_err(), "end of stream");
    }

    #[tokio::test]
    async fn out_of_step_streams_are_errors_not_panics() {
        assert!(input(b"VA x\r\n").replies(1).await.is_err());
        assert!(input(b"VA 3\r\nabcd\r\nMN\r\n").replies(1).await.is_err());
        assert!(input(b"HD\r\nHD\r\nMN\r\n").replies(1).await.is_err());
        assert!(input(b"VA 99999999999999999999999\r\n")
            .replies(1)
            .await
            .is_err());
        assert!(input(b"VA 18446744073709551615\r\n")
            .replies(1)
            .await
            .is_err());
    }
}
