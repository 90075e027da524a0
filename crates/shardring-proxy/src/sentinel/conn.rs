//! One connection to a Sentinel: commands written, replies read whole however they arrive, the read
//! buffer bounded by [`MAX_REPLY`].

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::connect::SentinelStream;
use super::resp::{self, Value, LIMITS, MAX_REPLY};
use crate::error::SentinelCause;
use crate::protocol::redis::ReplyFramer;

/// How much one read asks for.
const READ_CHUNK: usize = 4096;

/// An open connection to a Sentinel.
pub(crate) struct Conn {
    /// The stream, from the client's [`super::Connect`].
    stream: SentinelStream,
    /// Bytes read and not yet returned as replies: the start of the next reply (and, on a subscribed
    /// connection, messages after it).
    buf: BytesMut,
    /// Where the reply at the start of `buf` ends, found once however many reads it takes.
    framer: ReplyFramer,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// A connection over `stream`.
    pub(crate) fn new(stream: SentinelStream) -> Conn {
        Conn {
            stream,
            buf: BytesMut::new(),
            framer: ReplyFramer::new(LIMITS),
        }
    }

    /// Writes `commands`, pipelined, in one write.
    ///
    /// # Errors
    /// [`SentinelCause::Lost`] when the write fails.
    pub(crate) async fn send(&mut self, commands: &[&[&str]]) -> Result<(), SentinelCause> {
        let mut out = Vec::new();
        for args in commands {
            resp::command(&mut out, args);
        }
        let written = async {
            self.stream.write_all(&out).await?;
            self.stream.flush().await
        };
        written
            .await
            .map_err(|e| SentinelCause::Lost(e.to_string()))
    }

    /// The next reply. Cancel-safe: a read cancelled midway loses nothing, the next call carries on.
    ///
    /// # Errors
    /// [`SentinelCause::Lost`] when the connection fails or closes, [`SentinelCause::Malformed`] when
    /// what arrives is not RESP2 or is longer than [`MAX_REPLY`] (the connection is then out of step
    /// and must be dropped).
    pub(crate) async fn read(&mut self) -> Result<Value, SentinelCause> {
        loop {
            if !self.buf.is_empty() {
                match self.framer.frame(&self.buf) {
                    Ok(Some(framed)) => {
                        let reply = self.buf.split_to(framed.len);
                        return resp::decode(&reply)
                            .map_err(|why| SentinelCause::Malformed(why.to_string()));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(SentinelCause::Malformed(e.reason.to_string())),
                }
            }
            // The framer refuses a reply over MAX_REPLY before it is whole; this is the backstop that
            // keeps the buffer bounded whatever the framer decides.
            if self.buf.len() >= MAX_REPLY {
                return Err(SentinelCause::Malformed(format!(
                    "reply over {MAX_REPLY} bytes"
                )));
            }
            let mut chunk = [0u8; READ_CHUNK];
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|e| SentinelCause::Lost(e.to_string()))?;
            if n == 0 {
                return Err(SentinelCause::Lost("closed by the Sentinel".into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
