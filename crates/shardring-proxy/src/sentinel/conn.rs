//! One connection to a Sentinel: commands written, replies read whole however they arrive, the read
//! buffer bounded by [`MAX_REPLY`].
//!
//! Replies are read by the workspace's one RESP reader, `shardring-resp`'s [`ReplyReader`] (the crate
//! the proxy frames its Redis replies with and `shardring migrate` reads its own with), within small
//! limits ([`LIMITS`]): it never panics and never trusts a length. What a Sentinel may send is
//! narrower than what that reader reads: RESP2 only ([`is_resp2`]), since a Sentinel is never sent
//! `HELLO 3`.

use bytes::BytesMut;
use shardring_resp::{elements, ReplyLimits, ReplyReader, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::connect::SentinelStream;
use crate::error::SentinelCause;

/// How much one read asks for.
const READ_CHUNK: usize = 4096;

/// The largest Sentinel reply read: a master's address, a subscription confirmation or an event's
/// message is well under 1 KiB; anything near this is a confused or hostile peer, and is refused before
/// more of it is buffered.
pub(crate) const MAX_REPLY: usize = 64 << 10;

/// The reader's limits for Sentinel replies: none is longer than [`MAX_REPLY`], and none has values
/// inside a fourth nested aggregate (a message or a master's state is one array of strings; the
/// Sentinel client has always refused that fourth level, and the reader now does before it is
/// buffered).
pub(crate) const LIMITS: ReplyLimits = ReplyLimits {
    max_bulk_len: MAX_REPLY,
    max_depth: 3,
    max_reply_len: MAX_REPLY,
    max_line_len: MAX_REPLY,
};

/// An open connection to a Sentinel.
pub(crate) struct Conn {
    /// The stream, from the client's [`super::Connect`].
    stream: SentinelStream,
    /// Bytes read and not yet returned as replies: the start of the next reply (and, on a subscribed
    /// connection, messages after it).
    buf: BytesMut,
    /// Reads the reply at the start of `buf`, framed once however many reads it takes.
    reader: ReplyReader,
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
            reader: ReplyReader::new(LIMITS),
        }
    }

    /// Writes `commands`, pipelined, in one write.
    ///
    /// # Errors
    /// [`SentinelCause::Lost`] when the write fails.
    pub(crate) async fn send(&mut self, commands: &[&[&str]]) -> Result<(), SentinelCause> {
        let mut out = Vec::new();
        for args in commands {
            command(&mut out, args);
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
            if let Some(value) = next_reply(&mut self.reader, &mut self.buf)? {
                return Ok(value);
            }
            // The reader refuses a reply over MAX_REPLY before it is whole; this is the backstop that
            // keeps the buffer bounded whatever the reader decides.
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

/// The reply at the start of `buf`, taken off it, once it is whole (`None` until then: read more and
/// call again with `buf` grown). `reader` carries on from the previous call, so a reply arriving in
/// many reads is framed once.
///
/// # Errors
/// [`SentinelCause::Malformed`] when the bytes are not RESP, pass [`LIMITS`] or are not RESP2.
fn next_reply(
    reader: &mut ReplyReader,
    buf: &mut BytesMut,
) -> Result<Option<Value>, SentinelCause> {
    let (value, len) = match reader.read(buf) {
        Ok(Some(read)) => read,
        Ok(None) => return Ok(None),
        Err(e) => return Err(SentinelCause::Malformed(e.reason.to_string())),
    };
    let reply = buf.split_to(len);
    if !is_resp2(&reply) {
        return Err(SentinelCause::Malformed("not a RESP2 value".into()));
    }
    Ok(Some(value))
}

/// Whether `reply`, one whole reply as the reader framed it with [`LIMITS`], is RESP2 throughout.
///
/// The reader reads RESP3 too, and some of it into the same values as RESP2 (`_` and `$-1` are both
/// [`Value::Null`], `!` and `-` both [`Value::Error`], a streamed string a [`Value::Bulk`]), so the type
/// bytes tell: RESP2 is `+`, `-`, `:`, `$<n>`, and `*<n>` of RESP2 values. A
/// Sentinel is never sent `HELLO 3`; one that answers in RESP3 anyway is out of step. The recursion
/// is as deep as the reply's nesting, which the reader bounded.
fn is_resp2(reply: &[u8]) -> bool {
    match reply {
        [b'+' | b'-' | b':', ..] => true,
        // `$?` starts a streamed string; `$-1` is RESP2's null.
        [b'$', rest @ ..] => rest.first() != Some(&b'?'),
        b"*-1\r\n" => true,
        // `*?` starts a streamed array.
        [b'*', b'?', ..] => false,
        [b'*', ..] => elements(reply, LIMITS).is_some_and(|values| {
            values
                .into_iter()
                .all(|range| reply.get(range).is_some_and(is_resp2))
        }),
        _ => false,
    }
}

/// Appends the command `args` to `out`, as an array of bulk strings.
fn command(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What reading `input` with a fresh reader gives, and the bytes it leaves.
    fn read(input: &[u8]) -> (Result<Option<Value>, SentinelCause>, BytesMut) {
        let mut buf = BytesMut::from(input);
        let read = next_reply(&mut ReplyReader::new(LIMITS), &mut buf);
        (read, buf)
    }

    #[test]
    fn the_replies_a_sentinel_sends_are_read() {
        let bulk = |s: &str| Value::Bulk(s.as_bytes().to_vec());
        let cases: &[(&[u8], Value)] = &[
            (b"+OK\r\n", Value::Simple(b"OK".to_vec())),
            (
                b"-WRONGPASS invalid username-password pair\r\n",
                Value::Error("WRONGPASS invalid username-password pair".into()),
            ),
            (b":3\r\n", Value::Integer(3)),
            (b"$-1\r\n", Value::Null),
            (b"*-1\r\n", Value::Null),
            (b"$0\r\n\r\n", bulk("")),
            (
                b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n",
                Value::Array(vec![bulk("127.0.0.1"), bulk("6379")]),
            ),
            (
                b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n",
                Value::Array(vec![
                    bulk("subscribe"),
                    bulk("+switch-master"),
                    Value::Integer(1),
                ]),
            ),
            // As deep as a Sentinel reply may nest, and an empty array one deeper.
            (
                b"*1\r\n*1\r\n*2\r\n+deep\r\n*0\r\n",
                Value::Array(vec![Value::Array(vec![Value::Array(vec![
                    Value::Simple(b"deep".to_vec()),
                    Value::Array(vec![]),
                ])])]),
            ),
        ];
        for (input, want) in cases {
            let (read, left) = read(input);
            assert_eq!(
                read.as_ref(),
                Ok(&Some(want.clone())),
                "{}",
                String::from_utf8_lossy(input)
            );
            assert!(left.is_empty(), "{}", String::from_utf8_lossy(input));
        }
    }

    /// Every malformed reply is an error, none panics, and none is taken for a value: RESP3 included,
    /// the types read into the same values as RESP2 ones too.
    #[test]
    fn malformed_replies_are_errors() {
        let cases: &[&[u8]] = &[
            b"?what\r\n",
            b"$2\r\nabcd\r\n",
            b"$-2\r\n",
            b"$x\r\n",
            b"*-2\r\n",
            b"*99999999999999999999\r\n",
            b":12a\r\n",
            b"+OK\rX",
            b"%1\r\n+a\r\n+b\r\n",
            b"_\r\n",
            b">2\r\n+a\r\n+b\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n+deep\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n+deep\r\n",
            b"*1\r\n_\r\n",
            b"!3\r\nERR\r\n",
            b"$?\r\n;1\r\na\r\n;0\r\n",
            b"*?\r\n+a\r\n.\r\n",
            b"*2\r\n$1\r\na\r\n*?\r\n.\r\n",
            b"#t\r\n",
            b",1.5\r\n",
            b",x\r\n",
            b"(12\r\n",
            b"=7\r\ntxt:abc\r\n",
            b"~1\r\n+a\r\n",
            b"|1\r\n+a\r\n+b\r\n+c\r\n",
        ];
        for input in cases {
            let (read, _) = read(input);
            assert!(
                matches!(read, Err(SentinelCause::Malformed(_))),
                "{} was not refused: {read:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// A reply cut short is not one yet (more is read; a Sentinel that closes then is lost), and bytes
    /// after a reply are the next one, not part of it.
    #[test]
    fn a_reply_is_read_only_once_whole_and_only_it() {
        for input in [&b""[..], b"$5\r\nab\r\n", b"*2\r\n$1\r\na\r\n", b"+OK\r"] {
            let (read, left) = read(input);
            assert_eq!(read, Ok(None), "{}", String::from_utf8_lossy(input));
            assert_eq!(&left[..], input);
        }
        let (read, left) = read(b"+OK\r\n+extra\r\n");
        assert_eq!(read, Ok(Some(Value::Simple(b"OK".to_vec()))));
        assert_eq!(&left[..], b"+extra\r\n");
    }

    #[test]
    fn a_reply_over_the_limit_is_refused_before_it_is_read() {
        let header = format!("${}\r\n", MAX_REPLY + 1);
        assert!(matches!(
            read(header.as_bytes()).0,
            Err(SentinelCause::Malformed(_))
        ));
        let line = vec![b'+'; MAX_REPLY + 2];
        assert!(matches!(read(&line).0, Err(SentinelCause::Malformed(_))));
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        command(&mut out, &["AUTH", "sécret"]);
        assert_eq!(out, b"*2\r\n$4\r\nAUTH\r\n$7\r\ns\xc3\xa9cret\r\n");
    }
}
