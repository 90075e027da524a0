//! The request parser as a [`Decoder`] for connections.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

use super::parse::parse_request;
use super::request::*;

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
#[derive(Debug, Clone, Default)]
pub struct RequestCodec {
    /// The limits the parser enforces.
    limits: Limits,
    /// Bytes of a refused data block still to drop.
    skip: u64,
    /// A refusal that closes the stream was returned: give nothing more.
    closed: bool,
}

impl RequestCodec {
    /// A codec enforcing `limits`.
    pub fn new(limits: Limits) -> RequestCodec {
        RequestCodec {
            limits,
            skip: 0,
            closed: false,
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
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
        match parse_request(buf, &self.limits) {
            Ok(None) => Ok(None),
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
