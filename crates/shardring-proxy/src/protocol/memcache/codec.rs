//! The request parser as a [`Decoder`] for connections.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

use std::sync::Arc;

use bytes::Bytes;

use super::parse::{parse_get_continuation, parse_get_prefix, parse_request, retrieval_word};
use super::request::*;
use crate::protocol::{facts_changed, Incoming, RequestDecoder, ServerFacts};

/// One item out of the request decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A request to serve.
    Request(Request),
    /// A refused request: reply this, and close afterwards when `close`.
    Refused(RequestError),
}

/// The request parser as a [`Decoder`]: frames requests, refuses bad ones, and drops refused data blocks
/// as they arrive, so no buffer grows past [`Limits::max_request_len`].
///
/// A retrieval line longer than the line limit is not refused (memcached and nutcracker take a `get` of
/// 10,000 keys): once the limit's worth of it is buffered, the keys wholly received go out as a request
/// of their own marked `more`, and so on until the line ends, so memory is bounded by what is in flight
/// rather than by the line.
#[derive(Debug, Clone, Default)]
pub struct RequestCodec {
    /// The limits the parser enforces.
    limits: Limits,
    /// Bytes of a refused data block still to drop.
    skip: u64,
    /// A refusal that closes the stream was returned: give nothing more.
    closed: bool,
    /// A retrieval line being streamed through: its command and `gat` exptime.
    /// (Boxed: rare, and the decoder is part of every client connection's memory, idle or not.)
    streaming: Option<Box<(GetKind, Option<Bytes>)>>,
    /// Drop input up to the end of the current line (a refused piece of a streamed line).
    discard_line: bool,
    /// Where the value limit comes from when it is the pool's servers' own.
    learned: Option<LearnedLimit>,
}

/// A value limit that is the largest `item_size_max` a pool's servers reported, once every one of
/// them has: no server of the pool stores a larger value, and a smaller one goes to its server,
/// which answers for itself.
#[derive(Debug, Clone)]
struct LearnedLimit {
    /// What each of the pool's servers said.
    servers: Arc<[Arc<ServerFacts>]>,
    /// The count of [`facts_changed`] the limit was last computed at.
    seen: u64,
    /// The limit while no server has said, and the most any server's word can raise it to: what
    /// bounds the buffer.
    ceiling: usize,
}

impl RequestCodec {
    /// A codec enforcing `limits`.
    pub fn new(limits: Limits) -> RequestCodec {
        RequestCodec {
            limits,
            ..RequestCodec::default()
        }
    }

    /// A codec whose value limit is the largest `item_size_max` any of `servers` reported, and
    /// `limits.max_value_len` (the ceiling) while any of them has not.
    pub(crate) fn with_server_limits(
        limits: Limits,
        servers: Arc<[Arc<ServerFacts>]>,
    ) -> RequestCodec {
        let mut codec = RequestCodec {
            limits,
            learned: Some(LearnedLimit {
                servers,
                seen: u64::MAX,
                ceiling: limits.max_value_len,
            }),
            ..RequestCodec::default()
        };
        codec.refresh_value_limit();
        codec
    }

    /// The limits it enforces now.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The most bytes one request can occupy in its buffer, whatever the servers say later.
    pub fn max_request_len(&self) -> usize {
        let value = self
            .learned
            .as_ref()
            .map_or(self.limits.max_value_len, |l| l.ceiling);
        self.limits.max_line_len + value + 2
    }

    /// Recomputes the value limit from the servers' facts when any has changed since the last time:
    /// one atomic load per request otherwise.
    fn refresh_value_limit(&mut self) {
        let Some(learned) = &mut self.learned else {
            return;
        };
        let now = facts_changed();
        if learned.seen == now {
            return;
        }
        learned.seen = now;
        // A server that has not said (not connected to yet, or one that does not answer `stats
        // settings`) may store anything up to the ceiling: until every server has said, the ceiling.
        let largest = learned
            .servers
            .iter()
            .map(|f| f.max_value_len())
            .try_fold(0, |most, len| len.map(|len| most.max(len)));
        self.limits.max_value_len = largest.map_or(learned.ceiling, |s| s.min(learned.ceiling));
    }

    /// Takes a piece of a streamed retrieval line off `buf`, and notes whether the line goes on.
    fn streamed(
        &mut self,
        buf: &mut BytesMut,
        piece: Result<Option<(Request, usize)>, RequestError>,
    ) -> Option<Decoded> {
        match piece {
            Ok(None) => None,
            Ok(Some((request, taken))) => {
                buf.advance(taken);
                self.streaming = match &request.command {
                    Command::Get {
                        kind,
                        exptime,
                        more: true,
                        ..
                    } => Some(Box::new((
                        *kind,
                        exptime.clone().map(|e| request.frame.slice(e)),
                    ))),
                    _ => None,
                };
                Some(Decoded::Request(request))
            }
            Err(err) => {
                // The rest of the line is dropped; the next line is read in step.
                self.streaming = None;
                self.discard_line = true;
                Some(Decoded::Refused(err))
            }
        }
    }
}

impl Decoder for RequestCodec {
    type Item = Decoded;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, std::io::Error> {
        if self.closed {
            buf.clear();
            return Ok(None);
        }
        if self.skip > 0 {
            let n = usize::try_from(self.skip)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            buf.advance(n);
            self.skip -= n as u64;
            if self.skip > 0 {
                return Ok(None);
            }
        }
        if self.discard_line {
            match memchr::memchr(b'\n', buf) {
                Some(nl) => {
                    buf.advance(nl + 1);
                    self.discard_line = false;
                }
                None => {
                    buf.clear();
                    return Ok(None);
                }
            }
        }
        if let Some(streaming) = &self.streaming {
            let (kind, exptime) = &**streaming;
            let whole_line = memchr::memchr(b'\n', buf).is_some();
            if !whole_line && buf.len() < self.limits.max_line_len {
                return Ok(None);
            }
            let piece = parse_get_continuation(buf, *kind, exptime.as_deref(), &self.limits);
            return Ok(self.streamed(buf, piece));
        }
        self.refresh_value_limit();
        match parse_request(buf, &self.limits) {
            Ok(None) => {
                if buf.len() <= self.limits.max_line_len {
                    return Ok(None);
                }
                let Some(kind) = retrieval_word(buf) else {
                    return Ok(None);
                };
                let piece = match parse_get_prefix(buf, kind, &self.limits) {
                    // Past the line limit and not one key yet: a key longer than any limit.
                    Ok(None) => Err(RequestError {
                        kind: RequestErrorKind::KeyTooLong,
                        consumed: 0,
                        skip: 0,
                        close: false,
                        noreply: false,
                    }),
                    other => other,
                };
                Ok(self.streamed(buf, piece))
            }
            Ok(Some(Parsed {
                len,
                command,
                strip,
            })) => {
                let frame = buf.split_to(len).freeze();
                Ok(Some(Decoded::Request(Request {
                    frame,
                    command,
                    strip,
                })))
            }
            Err(err) => {
                buf.advance(err.consumed.min(buf.len()));
                if err.close {
                    self.closed = true;
                    buf.clear();
                } else {
                    self.skip = err.skip;
                }
                Ok(Some(Decoded::Refused(err)))
            }
        }
    }
}

impl RequestDecoder for RequestCodec {
    type Request = Request;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Incoming<Request>>> {
        Ok(
            tokio_util::codec::Decoder::decode(self, buf)?.map(|d| match d {
                Decoded::Request(r) => Incoming::Request(r),
                Decoded::Refused(err) => Incoming::Refused {
                    reply: Bytes::from_static(err.reply()),
                    reason: err.kind.to_string(),
                    close: err.close,
                },
            }),
        )
    }

    fn max_buffer(&self) -> usize {
        self.max_request_len()
    }
}
