//! The request decoder of a client connection: the request scanner as a [`Decoder`] (for tools and
//! the fuzz targets) and as the proxy's [`RequestDecoder`].

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

use super::request::{Limits, Request, RequestError, RequestScanner, Scanned};
use crate::protocol::{Incoming, RequestDecoder};

/// One item out of the request decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A request to serve.
    Request(Request),
    /// A refused request: reply this, and close afterwards when `close`.
    Refused(RequestError),
}

/// The request scanner as a [`Decoder`]: frames requests, refuses bad ones, swallows empty ones
/// (`*0`, blank lines) as Redis does, and gives nothing more after a refusal that closes.
#[derive(Debug, Clone, Default)]
pub struct RequestCodec {
    /// The scanner, with its place in the current request.
    scanner: RequestScanner,
    /// A refusal that closes the stream was returned: give nothing more.
    closed: bool,
}

impl RequestCodec {
    /// A codec enforcing `limits`.
    pub fn new(limits: Limits) -> RequestCodec {
        RequestCodec {
            scanner: RequestScanner::new(limits),
            closed: false,
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> &Limits {
        self.scanner.limits()
    }
}

impl Decoder for RequestCodec {
    type Item = Decoded;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, std::io::Error> {
        loop {
            if self.closed {
                buf.clear();
                return Ok(None);
            }
            match self.scanner.scan(buf) {
                Ok(None) => return Ok(None),
                Ok(Some(Scanned::Array { len, args })) => {
                    let frame = buf.split_to(len).freeze();
                    if !args.is_empty() {
                        return Ok(Some(Decoded::Request(Request {
                            frame,
                            args,
                            command: std::cell::OnceCell::new(),
                        })));
                    }
                }
                Ok(Some(Scanned::Inline { len, args })) => {
                    buf.advance(len);
                    if !args.is_empty() {
                        return Ok(Some(Decoded::Request(Request::from_args(&args))));
                    }
                }
                Err(err) => {
                    buf.advance(err.consumed.min(buf.len()));
                    if err.close {
                        self.closed = true;
                        buf.clear();
                    }
                    return Ok(Some(Decoded::Refused(err)));
                }
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
                    reply: err.kind.reply(),
                    reason: err.kind.to_string(),
                    close: err.close,
                },
            }),
        )
    }

    fn max_buffer(&self) -> usize {
        self.limits().max_request_len
    }
}
